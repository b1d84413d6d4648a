"""The editor writes Python the way the starters do: 4-space indentation that Backspace and
Shift+Tab undo one level at a time, a way out with the completion list open, and the line a
traceback points at marked in the gutter."""

import re

import pytest

from tests.browser.test_learner_flow import EXERCISE, GRADE_MS, replace_code

pytestmark = pytest.mark.browser


def line_text(page, n: int) -> str:
    return page.locator(".cm-line").nth(n - 1).evaluate("el => el.textContent")


def test_enter_after_a_colon_indents_by_four_and_backspace_takes_one_level_back(new_page):
    page = new_page()
    page.goto(EXERCISE)
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


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_one_escape_closes_the_completion_list_and_tab_then_leaves(new_page, lang):
    page = new_page()
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


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (390, "dark")])
def test_the_line_of_a_syntax_error_is_marked_in_the_gutter(new_page, width, scheme):
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    replace_code(page, "import torch\n\ndef train(model, optimizer, batches, accum_steps):\n"
                       "    for batch in batches\n        pass\n")
    page.get_by_role("button", name=re.compile("Submit")).click()
    verdict = page.locator(".verdict-card.verdict-error")
    verdict.wait_for(timeout=GRADE_MS)
    assert "line 4" in verdict.inner_text()
    assert verdict.locator(".verdict-mark svg").count() == 1, "a drawn mark, not a font's glyph"
    mark = page.locator(".cm-failing-mark")
    mark.wait_for()
    assert mark.count() == 1
    line = page.locator(".cm-line").nth(3).bounding_box()
    box = mark.bounding_box()
    assert line["y"] <= box["y"] + box["height"] / 2 <= line["y"] + line["height"], "beside line 4"
    # the mark follows the newest verdict
    replace_code(page, "def train(model, optimizer, batches, accum_steps)\n    pass\n")
    page.get_by_role("button", name=re.compile("Submit")).click()
    page.locator(".verdict-card.verdict-error", has_text="line 1").wait_for(timeout=GRADE_MS)
    first = page.locator(".cm-line").first.bounding_box()
    page.wait_for_function("() => true")
    box = page.locator(".cm-failing-mark").bounding_box()
    assert first["y"] <= box["y"] + box["height"] / 2 <= first["y"] + first["height"], "beside line 1"
