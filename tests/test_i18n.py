"""Languages: every UI string translated (all pt_BR plural forms), and how the language is chosen."""

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from app import i18n
from app.config import ROOT
from contracts.languages import LANGS
from tests.conftest import html

KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2)}


def _source_messages() -> set[str | tuple[str, str]]:
    found = set()
    method_map = [("app/**.py", "python"), ("worker/**.py", "python"), ("templates/**.html", "jinja2")]
    options = {"templates/**.html": {"extensions": "jinja2.ext.i18n"}}
    for _file, _line, message, _comments, _ctx in extract_from_dir(
        str(ROOT), method_map, options, keywords=KEYWORDS
    ):
        found.add(message)
    return found


def test_every_ui_string_has_a_complete_portuguese_translation():
    with i18n.po_path("pt-BR").open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    assert catalog.num_plurals == 3
    messages = _source_messages()
    assert len(messages) > 20
    for message in messages:
        entry = catalog.get(message[0] if isinstance(message, tuple) else message)
        assert entry is not None, f"not in the pt_BR catalog (run `make i18n`): {message!r}"
        assert not entry.fuzzy, f"fuzzy: {message!r}"
        strings = entry.string if isinstance(entry.string, tuple) else (entry.string,)
        expected = 3 if isinstance(message, tuple) else 1
        assert len(strings) == expected and all(strings), f"untranslated: {message!r}"


@pytest.mark.parametrize(("n", "word"), [(0, "minuto"), (1, "minuto"), (2, "minutos"), (8, "minutos")])
def test_portuguese_plurals(n, word):
    i18n.set_lang("pt-BR")
    try:
        assert i18n.ngettext("%(num)d minute", "%(num)d minutes", n) % {"num": n} == f"{n} {word}"
    finally:
        i18n.set_lang("en")


def test_numbers_follow_the_language():
    i18n.set_lang("pt-BR")
    try:
        assert i18n.number(1234.5) == "1.234,50"
    finally:
        i18n.set_lang("en")
    assert i18n.number(4) == "4.00"


def _lang(response) -> str:
    return html(response).html["lang"]


def test_query_parameter_wins_and_is_remembered(client):
    response = client.get("/", params={"lang": "pt-BR"}, headers={"Accept-Language": "en"})
    assert _lang(response) == "pt-BR"
    assert response.headers["content-language"] == "pt-BR"
    assert client.cookies["treino_lang"] == "pt-BR"
    assert _lang(client.get("/", headers={"Accept-Language": "en"})) == "pt-BR"
    assert _lang(client.get("/", params={"lang": "en"})) == "en"
    assert _lang(client.get("/")) == "en"


@pytest.mark.parametrize(
    ("header", "lang"),
    [
        ("pt-BR,pt;q=0.9,en;q=0.8", "pt-BR"),
        ("pt", "pt-BR"),
        ("fr-FR, en;q=0.5, pt;q=0.4", "en"),
        ("en;q=0.2, pt-BR;q=0.9", "pt-BR"),
        ("de, fr", "en"),
        ("", "en"),
        (";;;q=abc,,", "en"),
    ],
)
def test_accept_language_when_nothing_was_chosen(client, header, lang):
    assert _lang(client.get("/", headers={"Accept-Language": header})) == lang


@pytest.mark.parametrize("bad", ["fr", "xx-YY", "", "<script>", "pt-BR" * 50])
def test_an_unknown_lang_falls_back(client, bad):
    response = client.get("/lessons/bottleneck", params={"lang": bad})
    assert response.status_code == 200
    assert _lang(response) == "en"
    assert "treino_lang" not in response.cookies


def test_language_switcher_marks_the_current_language(client):
    page = html(client.get("/lessons/bottleneck", params={"lang": "pt-BR"}))
    links = page.select(".languages a")
    assert [a["hreflang"] for a in links] == list(LANGS)
    assert [a.get("aria-current") for a in links] == [None, "true"]
    assert links[0]["href"].endswith("/lessons/bottleneck?lang=en")
