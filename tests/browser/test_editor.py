"""The editor writes Python the way the starters do: 4-space indentation that Backspace and
Shift+Tab undo one level at a time, a way out with the completion list open, and the line a
traceback points at marked in the gutter."""

import pytest

from tests.browser.test_learner_flow import EXERCISE, GRADE_MS, replace_code

pytestmark = pytest.mark.browser


def line_text(page, n: int) -> str:
    return page.locator(".cm-line").nth(n - 1).evaluate("el => el.textContent")


# every language at every size, each scheme in each language and at each size: the pairs a
# page's look or its keys could depend on (all eight combinations cost twice as much and cover
# no pair more)
MATRIX = [("en", 390, "light"), ("en", 1280, "dark"), ("pt-BR", 390, "dark"), ("pt-BR", 1280, "light")]


@pytest.mark.parametrize(("lang", "width", "scheme"), MATRIX)
def test_enter_after_a_colon_indents_by_four_and_backspace_takes_one_level_back(
    new_page, lang, width, scheme
):
    """Cheap: every language and size, each scheme (MATRIX)."""
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    replace_code(page, "def f():")
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    assert line_text(page, 2) == " " * 4, "the starters' unit, not 2"
    page.keyboard.type("for i in range(3):")
    page.keyboard.press("Enter")
    assert line_text(page, 3) == " " * 8
    page.keyboard.press("Backspace")
    assert line_text(page, 3) == " " * 4, "one level, not one space"
    page.keyboard.type("x = 1")
    page.keyboard.press("Shift+Tab")
    assert line_text(page, 3) == "x = 1"
    page.keyboard.press("Tab")
    assert line_text(page, 3) == "    x = 1"
    assert page.locator("textarea#code").input_value().endswith("    x = 1")


@pytest.mark.parametrize(("lang", "width", "scheme"), MATRIX)
def test_one_escape_closes_the_completion_list_and_tab_then_leaves(new_page, lang, width, scheme):
    """Cheap: every language and size, each scheme (MATRIX)."""
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Enter")
    page.keyboard.type("opt")
    popup = page.locator(".cm-tooltip-autocomplete")
    popup.wait_for()
    page.keyboard.press("Escape")
    expect_gone(popup)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.value") == "submit", "focus moved on to Submit"


def expect_gone(locator) -> None:
    locator.wait_for(state="detached")


def mark_beside(page, n: int) -> bool:
    line = page.locator(".cm-line").nth(n - 1).bounding_box()
    box = page.locator(".cm-failing-mark").bounding_box()
    return box is not None and line["y"] <= box["y"] + box["height"] / 2 <= line["y"] + line["height"]


def wait_mark_beside(page, n: int) -> None:
    """The mark moves once the editor has taken the new verdict, and the page scrolls the verdict
    into view (the line and the mark are measured one after the other): poll its place (the
    page's CSP forbids the string evaluation wait_for_function needs)."""
    for _ in range(200):
        if mark_beside(page, n):
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"the failing mark is not beside line {n}")


@pytest.mark.parametrize(
    ("lang", "width", "scheme", "line_word"), [("en", 1280, "light", "line"), ("pt-BR", 390, "dark", "linha")]
)
def test_the_line_of_a_syntax_error_is_marked_in_the_gutter(new_page, lang, width, scheme, line_word):
    """Slow (two grades): one representative per axis, English on a light desktop, Portuguese
    on a dark phone."""
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    replace_code(
        page,
        "import torch\n\ndef train(model, optimizer, batches, accum_steps):\n"
        "    for batch in batches\n        pass\n",
    )
    page.locator("button[name=mode][value=submit]").click()
    verdict = page.locator(".verdict-card.verdict-error")
    verdict.wait_for(timeout=GRADE_MS)
    assert f"{line_word} 4" in verdict.inner_text()
    assert verdict.locator(".verdict-mark svg").count() == 1, "a drawn mark, not a font's glyph"
    mark = page.locator(".cm-failing-mark")
    mark.wait_for()
    assert mark.count() == 1
    wait_mark_beside(page, 4)  # (the new verdict scrolls into view: measured once the page is still)
    # the mark follows the newest verdict
    replace_code(page, "def train(model, optimizer, batches, accum_steps)\n    pass\n")
    page.locator("button[name=mode][value=submit]").click()
    page.locator(".verdict-card.verdict-error", has_text=f"{line_word} 1").wait_for(timeout=GRADE_MS)
    wait_mark_beside(page, 1)
