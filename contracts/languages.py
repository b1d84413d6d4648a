"""The course's languages: every lesson, quiz, exercise and message exists in each of them."""

LANGS = ("en", "pt-BR")
DEFAULT_LANG = "en"


def language(lang: str) -> str:
    """``lang`` where the course has it, else the default."""
    return lang if lang in LANGS else DEFAULT_LANG
