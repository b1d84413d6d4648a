"""`make i18n` leaves the catalogues as committed: the template is what extraction gives today, and
the pt-BR catalogue holds exactly the template's messages (issue 44: the template still carried the
tutor's old cut-off note, 'hear the rest', and the catalogue three strings no code says any more)."""

import io

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po, write_po

from app import i18n
from app.config import ROOT

TEMPLATE = ROOT / "app" / "locales" / "messages.pot"


def _extracted() -> bytes:
    """What the Makefile's `pybabel extract` writes (--no-location --omit-header, babel.cfg's map)."""
    catalog = Catalog()
    method_map = [("app/**.py", "python"), ("worker/**.py", "python"), ("templates/**.html", "jinja2")]
    options = {"templates/**.html": {"extensions": "jinja2.ext.i18n"}}
    keywords = {"_": None, "gettext": None, "ngettext": (1, 2)}
    for _file, _line, message, comments, context in extract_from_dir(
        str(ROOT), method_map, options, keywords=keywords
    ):
        catalog.add(message, None, auto_comments=comments, context=context)
    buf = io.BytesIO()
    write_po(buf, catalog, omit_header=True, no_location=True)
    return buf.getvalue()


def _ids(catalog) -> set:
    return {m.id if isinstance(m.id, str) else tuple(m.id) for m in catalog if m.id}


def test_the_template_is_what_extraction_gives():
    assert TEMPLATE.read_bytes() == _extracted(), "app/locales/messages.pot is stale: run `make i18n`"


def test_the_portuguese_catalogue_holds_the_template_s_messages_and_no_others():
    with TEMPLATE.open("rb") as f:
        template = _ids(read_po(f))
    with i18n.po_path("pt-BR").open("rb") as f:
        catalogue = _ids(read_po(f, locale="pt_BR"))
    assert not template - catalogue, f"not in the catalogue: {sorted(map(str, template - catalogue))[:3]}"
    assert not catalogue - template, f"no code says: {sorted(map(str, catalogue - template))[:3]}"
