"""UI strings through gettext catalogs (Babel), and the visitor's language.

Catalogs live in app/locales/<locale>/LC_MESSAGES/messages.po and are compiled in memory at
start, so a source checkout needs no build step. English is the source language.
"""

import gettext as _gettext
from contextvars import ContextVar
from functools import cache
from io import BytesIO
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal

from contracts.languages import DEFAULT_LANG, LANGS

LOCALES_DIR = Path(__file__).parent / "locales"
_lang: ContextVar[str] = ContextVar("lang", default=DEFAULT_LANG)


def locale_name(lang: str) -> str:
    """`pt-BR` (how the web names it) → `pt_BR` (how gettext and Babel name it)."""
    return lang.replace("-", "_")


def po_path(lang: str) -> Path:
    return LOCALES_DIR / locale_name(lang) / "LC_MESSAGES" / "messages.po"


@cache
def translations(lang: str) -> _gettext.NullTranslations:
    if lang == DEFAULT_LANG:
        return _gettext.NullTranslations()
    with po_path(lang).open("rb") as f:
        catalog = read_po(f, locale=locale_name(lang))
    buf = BytesIO()
    write_mo(buf, catalog, use_fuzzy=False)
    buf.seek(0)
    return _gettext.GNUTranslations(buf)


def set_lang(lang: str) -> None:
    _lang.set(lang)


def current_lang() -> str:
    return _lang.get()


def gettext(message: str) -> str:
    return translations(_lang.get()).gettext(message)


def ngettext(singular: str, plural: str, n: int) -> str:
    return translations(_lang.get()).ngettext(singular, plural, n)


def number(value: float, digits: int = 2) -> str:
    """A number as the visitor's language writes it (pt-BR: 4,00)."""
    return format_decimal(value, format=f"#,##0.{'0' * digits}", locale=locale_name(_lang.get()))


def supported(lang: str | None) -> str | None:
    """The course language matching `lang` (case-insensitive; `pt`, `pt_BR` → `pt-BR`), if any."""
    if not lang:
        return None
    wanted = lang.strip().replace("_", "-").lower()
    for candidate in LANGS:
        if wanted in (candidate.lower(), candidate.split("-")[0].lower()):
            return candidate
    return None


def negotiate(accept_language: str | None) -> str | None:
    """The best course language for an Accept-Language header, by its q-values."""
    if not accept_language:
        return None
    ranked = []
    for i, part in enumerate(accept_language.split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                continue
        ranked.append((-q, i, tag))
    for _q, _i, tag in sorted(ranked):
        if _q == 0:
            break
        if match := supported(tag):
            return match
    return None


@cache
def language_name(lang: str) -> str:
    """The language's own name for itself (English, português)."""
    try:
        name = Locale.parse(locale_name(lang)).get_display_name(locale_name(lang)) or lang
    except (UnknownLocaleError, ValueError):
        return lang
    return name[:1].upper() + name[1:]
