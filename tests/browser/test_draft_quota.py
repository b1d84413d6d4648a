"""A draft save the server refuses (the anonymous visitors behind one address have used their free
storage, issue 43) says why beside the editor, in the learner's language, and loses nothing: the
code stays in the editor and in this browser, and is there again after a reload."""

import pytest

from tests.browser.conftest import serving
from tests.browser.test_learner_flow import EXERCISE, SOLUTION, replace_code

pytestmark = pytest.mark.browser

SAID = {
    "en": ("Sign in to keep yours on the server", "still in the editor"),
    "pt-BR": ("Entre na sua conta", "continua no editor"),
}


@pytest.fixture(scope="module")
def live_server(live_database):
    """This module's server keeps one anonymous draft per address: the second visitor is refused."""
    with serving(live_database, anonymous_drafts_per_client=1) as url:
        yield url


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_a_refused_draft_says_why_and_the_code_stays(new_page, lang):
    first = new_page(viewport={"width": 1280, "height": 900}, locale=lang)
    first.goto(f"{EXERCISE}?lang={lang}")
    first.locator(".cm-editor").wait_for()
    replace_code(first, SOLUTION + "\n# the first visitor\n")
    # the address's one draft: the first visitor's (or, on the second run, already taken)
    first.locator("[data-draft-state]:not([hidden])").wait_for(timeout=15_000)

    second = new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, locale=lang)
    second.goto(f"{EXERCISE}?lang={lang}")
    second.locator(".cm-editor").wait_for()
    replace_code(second, SOLUTION + "\n# the second visitor\n")
    why, kept = SAID[lang]
    state = second.locator("[data-draft-state][role=status]", has_text=why)
    state.wait_for(timeout=15_000)
    assert kept in state.inner_text()
    assert "# the second visitor" in second.locator(".cm-content").inner_text(), "the code is still there"
    second.reload()
    second.locator(".cm-editor").wait_for()
    assert "# the second visitor" in second.locator(".cm-content").inner_text(), "kept in this browser"
