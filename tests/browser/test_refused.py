"""A Submit the server refuses (429) says why in the page, in the learner's language, and the
code stays in the editor: here, a second tab of the same learner while the first's job runs."""

import pytest

from tests.browser.test_learner_flow import EXERCISE, SOLUTION, replace_code

pytestmark = pytest.mark.browser

SLOW = "import time\ntime.sleep(8)  # still running when the second tab sends\n" + SOLUTION


@pytest.mark.parametrize(
    ("lang", "said"), [("en", "already have code waiting"), ("pt-BR", "já tem código esperando")]
)
def test_a_refused_submit_says_why_and_keeps_the_code(new_page, lang, said):
    first = new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, locale=lang)
    first.goto(f"{EXERCISE}?lang={lang}")
    first.locator(".cm-editor").wait_for()
    replace_code(first, SLOW)
    first.locator("button[name=mode][value=run]").click()
    first.locator("#submission-status.state-running").wait_for(timeout=60_000)

    second = first.context.new_page()
    second.goto(f"{EXERCISE}?lang={lang}")
    second.locator(".cm-editor").wait_for()
    replace_code(second, SOLUTION + "\n# the second tab\n")
    second.locator("button[name=mode][value=submit]").click()
    line = second.locator("#submission-status .status-line.is-error")
    line.wait_for()
    assert said in line.inner_text()
    assert "# the second tab" in second.locator(".cm-content").inner_text(), "the code is still there"
