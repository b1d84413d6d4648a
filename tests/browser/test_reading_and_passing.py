"""The learner's loop, second pass (issue 29), in a real browser: code that scrolls sideways with a
cue instead of wrapping to column 0 (lesson cards, the editor, the solution beside one's own),
hints read as Markdown, no keyboard shortcut on a phone, a run's output open and its verdict
brought into view, the verdict pushed (and still shown with the push blocked), a pass in each
exercise kind saying what it means, and the end of the course; both languages, 390 px and
desktop, light and dark."""

import re
import time

import pytest

from app.config import ROOT
from app.i18n import set_lang
from app.lessons.content import load_course
from app.submissions.present import pass_meaning
from app.submissions.routes import WAIT_SECONDS
from tests.browser.conftest import shot
from tests.browser.test_learner_flow import EXERCISE, GRADE_MS, SOLUTION, replace_code
from tests.browser.test_loop import overflow, too_wide

pytestmark = pytest.mark.browser

AXES = [("en", 1280, "light"), ("pt-BR", 390, "dark")]
LONG = "        x = model(x)  # " + "a comment that carries the point, " * 4 + "\n"


def phone_or_desktop(new_page, lang, width, scheme):
    phone = width < 600
    return new_page(
        viewport={"width": width, "height": 844 if phone else 900},
        is_mobile=phone,
        has_touch=phone,
        color_scheme=scheme,
        locale=lang,
    )


def scrolls_sideways(locator) -> bool:
    """Wider inside than its box, not wrapped, and dressed with the edge shadows."""
    return locator.evaluate("""(el) => {
      const style = getComputedStyle(el)
      return el.scrollWidth > el.clientWidth && ["auto", "scroll"].includes(style.overflowX)
        && style.backgroundImage.includes("gradient")
    }""")


@pytest.mark.parametrize(("lang", "width", "scheme"), AXES)
def test_code_scrolls_sideways_with_a_cue_and_hints_read_as_markdown(new_page, lang, width, scheme):
    """Quick (no grade)."""
    page = phone_or_desktop(new_page, lang, width, scheme)
    page.goto(f"/lessons/mixed-precision?lang={lang}")
    code = page.locator(".card pre", has_text="underflow").first
    code.scroll_into_view_if_needed()
    assert code.evaluate("el => getComputedStyle(el).whiteSpace") == "pre", "never wrapped"
    if width < 600:
        assert scrolls_sideways(code), "a cue that there is more to the right"
        shot(page, f"lesson-code-{lang}-{scheme}-{width}", code.locator("xpath=ancestor::li[1]"))
    assert overflow(page) <= 0, too_wide(page)

    page.goto(f"/lessons/mixed-precision/exercises/amp-loop?lang={lang}")
    page.locator(".cm-editor").wait_for()
    shortcut = page.locator("button[value=submit] .shortcut")
    assert shortcut.is_visible() == (width >= 600), "no Ctrl+Enter on a phone"
    page.locator(".hint-next").click()
    hint = page.locator("#hint-1 .hint-body")
    hint.locator("em").first.wait_for()  # (the hint arrives by htmx after the click)
    assert hint.locator("em").count() == 1 and "*" not in hint.inner_text()
    replace_code(page, "def train(model, loader):\n    for x, y in loader:\n" + LONG)
    line = page.locator(".cm-line", has_text="carries the point")
    single = page.locator(".cm-line").first.bounding_box()["height"]
    assert line.bounding_box()["height"] < 1.5 * single, "the long line stays one line"
    assert scrolls_sideways(page.locator(".cm-scroller"))
    assert overflow(page) <= 0, too_wide(page)


@pytest.mark.parametrize(("lang", "width", "scheme"), AXES)
def test_a_run_shows_its_output_comes_into_view_and_arrives_without_the_push(new_page, lang, width, scheme):
    """Two runs (quick): the pushed one, then one with the push blocked, which arrives by polling."""
    page = phone_or_desktop(new_page, lang, width, scheme)
    fetches = []
    page.on("request", lambda r: re.search(r"/submissions/\d+$", r.url) and fetches.append(r.url))
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    replace_code(page, SOLUTION + "\nprint('hello from the loop')\n")
    clicked = time.monotonic()
    page.locator("button[name=mode][value=run]").click()
    ran = page.locator(".verdict-card.verdict-ran")
    ran.wait_for(timeout=GRADE_MS)
    took = time.monotonic() - clicked
    assert page.locator("details.output").get_attribute("open") is not None, "a run's output is shown"
    assert "hello from the loop" in page.locator("details.output pre").inner_text()
    assert comes_into_view(page, ran), "the verdict came into view"
    # once per change of status (queued, running, ran) and once per wait that ended unchanged
    assert len(fetches) <= 3 + took / WAIT_SECONDS, f"polled: {len(fetches)} fetches in {took:.1f} s"
    shot(page, f"run-output-{lang}-{scheme}-{width}", full_page=False)

    first = ran.get_attribute("aria-labelledby")
    page.route(re.compile(r"/live/submissions/"), lambda route: route.abort())
    page.locator("button[name=mode][value=run]").click()
    page.locator(f".verdict-card.verdict-ran:not([aria-labelledby='{first}'])").wait_for(timeout=GRADE_MS)


def comes_into_view(page, locator) -> bool:
    """Whether the element's top is on screen within 3 s: the page scrolls to a new verdict
    smoothly (app.css's scroll-behavior), so one measure as it arrives can be mid-scroll; and
    scrolled to, its top sits at 0 up to a fraction of a pixel (-0.09 at 390 px in pt-BR: the
    scroll offset is whole pixels, the card's place in the page is not)."""
    for _ in range(60):
        if -1 < locator.bounding_box()["y"] < page.viewport_size["height"]:
            return True
        page.wait_for_timeout(50)
    return False


KINDS = {  # one exercise per check kind
    "accumulation": "gradient-accumulation/accumulate",
    "amp": "mixed-precision/amp-loop",
    "phases": "bottleneck/find-the-bottleneck",
    "pipeline": "bottleneck/input-pipeline",
    "checkpointing": "gpu-memory/fit-the-budget",
    "measure": "gpu-memory/measure-it",
}


def test_a_pass_in_each_exercise_kind_says_what_it_means_and_the_course_ends_on_a_page(new_page):
    """Slow (six grades): English on a light desktop; then the end of the course at 390 px in
    Portuguese, dark, and in English on the desktop."""
    course = load_course(ROOT / "lessons")
    page = new_page(viewport={"width": 1280, "height": 900}, color_scheme="light", locale="en")
    for kind, exercise_id in KINDS.items():
        exercise = course.exercise(exercise_id)
        page.goto(f"/lessons/{exercise.lesson}/exercises/{exercise.slug}")
        page.locator(".cm-editor").wait_for()
        replace_code(page, (exercise.path / "solution.py").read_text())
        page.locator("button[name=mode][value=submit]").click()
        passed = page.locator(".verdict-card.verdict-passed")
        passed.wait_for(timeout=GRADE_MS)
        set_lang("en")
        assert passed.locator(".verdict-plain").inner_text() == pass_meaning(exercise), kind
        compare = passed.locator("details.solution[open] .compare pre")
        assert compare.nth(1).evaluate("el => getComputedStyle(el).whiteSpace") == "pre", "indentation kept"
        shot(page, f"pass-{kind}", passed)
    page.goto("/course/end")
    assert page.locator(".end-lesson").count() == len(course.lessons)
    assert page.locator(".end-results .is-passed").count() >= len(KINDS)
    shot(page, "course-end-en-light-1280")
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/course/end?lang=pt-BR")
    assert page.locator("h1").inner_text() == "O fim do curso"
    assert page.locator(".end-results", has_text="concluído na tentativa 1").count() >= 1
    assert overflow(page) <= 0, too_wide(page)
    shot(page, "course-end-pt-BR-dark-390")
