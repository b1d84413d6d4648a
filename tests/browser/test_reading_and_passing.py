"""The learner's loop, second pass (issue 29), in a real browser: code that scrolls sideways with a
cue instead of wrapping to column 0 (lesson cards, the solution beside one's own; the editor on a
desktop, while on a phone its long lines wrap under their own indentation, issue 44),
hints read as Markdown, no keyboard shortcut on a phone, a run's output open and its verdict
brought into view and what it printed scrolling sideways like code, the verdict pushed (and still
shown with the push blocked), a pass in each exercise kind saying what it means (read in both
languages), named mistakes told what went wrong, and the end of the course; both languages, 390 px
and desktop, light and dark."""

import re
import time

import pytest

from app.config import ROOT
from app.i18n import set_lang
from app.lessons.course import load_course
from app.submissions.present import pass_meaning
from app.submissions.routes import WAIT_SECONDS
from tests.browser.conftest import shot
from tests.browser.test_learner_flow import EXERCISE, GRADE_MS, SOLUTION, replace_code
from tests.browser.test_loop import overflow, too_wide

pytestmark = pytest.mark.browser

AXES = [("en", 1280, "light"), ("pt-BR", 390, "dark")]
LONG = "        x = model(x)  # " + "a comment that carries the point, " * 4 + "\n"
LONG_OUTPUT = "    step 3: " + "a long line the program printed, " * 6  # wider than the verdict


def phone_or_desktop(new_page, lang, width, scheme):
    phone = width < 600
    return new_page(
        viewport={"width": width, "height": 844 if phone else 900},
        is_mobile=phone,
        has_touch=phone,
        color_scheme=scheme,
        locale=lang,
    )


def wrapped_rows(line) -> dict:
    """Where an editor line's text lies on screen: the right edge of its last character, the left
    of its first non-blank one, the leftmost left of its later rows, and the editor box's right."""
    return line.evaluate("""(line) => {
      const texts = []
      const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT)
      while (walker.nextNode()) texts.push(walker.currentNode)
      const charRect = (node, i) => {
        const range = document.createRange()
        range.setStart(node, i)
        range.setEnd(node, i + 1)
        return range.getBoundingClientRect()
      }
      const last = texts.filter((t) => t.length).at(-1)
      let code = null
      for (const t of texts) {
        const i = t.data.search(/\\S/)
        if (i >= 0) { code = charRect(t, i); break }
      }
      const whole = document.createRange()
      whole.selectNodeContents(line)
      const rects = [...whole.getClientRects()].filter((r) => r.width > 0)
      const top = Math.min(...rects.map((r) => r.top))
      const rest = rects.filter((r) => r.top > top + 2)
      return {
        end_right: charRect(last, last.length - 1).right,
        code_left: code.left,
        rest_left: Math.min(...rest.map((r) => r.left)),
        box_right: line.closest(".cm-scroller").getBoundingClientRect().right,
      }
    }""")


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
    if width < 600:  # no visible sideways bar on a phone: the line wraps, its end on screen
        rows = wrapped_rows(line)
        assert line.bounding_box()["height"] > 2.5 * single, rows
        assert rows["end_right"] <= rows["box_right"] + 0.5, "the end of the long line is in view"
        assert rows["rest_left"] > rows["code_left"] + 1, "wrapped rows start under the code, not at column 0"
        assert not scrolls_sideways(page.locator(".cm-scroller"))
        shot(page, f"editor-long-line-{lang}-{scheme}-{width}", page.locator(".code-editor"))
    else:
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
    replace_code(page, SOLUTION + f"\nprint('hello from the loop')\nprint({LONG_OUTPUT!r})\n")
    clicked = time.monotonic()
    page.locator("button[name=mode][value=run]").click()
    ran = page.locator(".verdict-card.verdict-ran")
    ran.wait_for(timeout=GRADE_MS)
    took = time.monotonic() - clicked
    assert page.locator("details.output").get_attribute("open") is not None, "a run's output is shown"
    output = page.locator("details.output pre")
    assert "hello from the loop" in output.inner_text()
    # what the program printed is code too: never wrapped below its indentation, it scrolls
    assert LONG_OUTPUT in output.inner_text().splitlines(), "one line, its indentation kept"
    assert output.evaluate("el => getComputedStyle(el).whiteSpace") == "pre", "never wrapped"
    assert scrolls_sideways(output), "a cue that there is more to the right"
    assert overflow(page) <= 0, too_wide(page)
    assert comes_into_view(page, ran), "the verdict came into view"
    # once per change of status (queued, running, ran) and once per wait that ended unchanged
    assert len(fetches) <= 3 + took / WAIT_SECONDS, f"polled: {len(fetches)} fetches in {took:.1f} s"
    shot(page, f"run-output-{lang}-{scheme}-{width}", full_page=False)
    shot(page, f"run-output-block-{lang}-{scheme}-{width}", output)  # (scrolls to it: after the above)

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
    "gputrace": "bottleneck/read-the-gpu-trace",
    "timing": "bottleneck/time-a-step",
    "checkpointing": "gpu-memory/fit-the-budget",
    "measure": "gpu-memory/measure-it",
    "hookstep": "model-memory/step-in-backward",
    "adapter": "model-memory/train-an-adapter",
    "chunked": "long-sequences/chunked-loss",
    "packing": "long-sequences/pack-the-batch",
}


def test_a_pass_in_each_exercise_kind_says_what_it_means_and_the_course_ends_on_a_page(new_page):
    """Slow (twelve grades): each passed in English on a light desktop, then the same verdict read
    in Portuguese on a dark 390 px phone (the words are chosen as the page is drawn, so no second
    grade); then the end of the course at 390 px in Portuguese, dark, and in English on the
    desktop."""
    course = load_course(ROOT / "lessons")
    assert set(KINDS) == {e.check_kind for e in course.exercises}, "one exercise of every kind"
    page = new_page(viewport={"width": 1280, "height": 900}, color_scheme="light", locale="en")
    for kind, exercise_id in KINDS.items():
        exercise = course.exercise(exercise_id)
        url = f"/lessons/{exercise.lesson}/exercises/{exercise.slug}"
        page.set_viewport_size({"width": 1280, "height": 900})
        page.emulate_media(color_scheme="light")
        page.goto(f"{url}?lang=en")
        page.locator(".cm-editor").wait_for()
        replace_code(page, (exercise.path / "solution.py").read_text())
        page.locator("button[name=mode][value=submit]").click()
        passed = page.locator(".verdict-card.verdict-passed")
        passed.wait_for(timeout=GRADE_MS)
        set_lang("en")
        assert passed.locator(".verdict-plain").inner_text() == pass_meaning(exercise), kind
        compare = passed.locator("details.solution[open] .compare pre")
        assert compare.nth(1).evaluate("el => getComputedStyle(el).whiteSpace") == "pre", "indentation kept"
        if kind == "measure":  # point 7: each median with its spread, and what was timed on
            times = passed.locator("figure.figure-configurations-time")
            assert times.locator(".bar-detail").count() == 5 and times.locator(".bar-spread").count() == 5
            assert "this worker's CPU (it has no GPU" in times.locator(".figure-note").inner_text()
        shot(page, f"pass-{kind}", passed)
        # the same pass, in Portuguese on a dark phone
        page.set_viewport_size({"width": 390, "height": 844})
        page.emulate_media(color_scheme="dark")
        page.goto(f"{url}?lang=pt-BR")
        passed = page.locator(".verdict-card.verdict-passed")
        passed.wait_for()
        assert passed.locator(".verdict-title").inner_text() == "Passou", kind
        set_lang("pt-BR")
        assert passed.locator(".verdict-plain").inner_text() == pass_meaning(exercise), kind
        assert overflow(page) <= 0, too_wide(page)
        shot(page, f"pass-{kind}-pt-BR-dark-390", passed)
    set_lang("en")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="light")
    page.goto("/course/end?lang=en")
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


MISTAKES = {  # issue 29, point 5: mistakes that said only a failing number, now with a diagnosis
    "gradient-accumulation/scaler-clipping": (
        "clip-missing",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)",
    ),
    "gpu-memory/fit-the-budget": ("grads-accumulated", "optimizer.zero_grad(set_to_none=True)"),
}
WHAT_WENT_WRONG = {"en": "What went wrong", "pt-BR": "O que deu errado"}


@pytest.mark.parametrize(("lang", "width", "scheme"), AXES)
def test_a_named_mistake_is_told_what_went_wrong(new_page, lang, width, scheme):
    """Two grades per axis (the words are the point, so both languages): no clipping at all in
    scaler-clipping, gradients never released in fit-the-budget."""
    from contracts import messages

    course = load_course(ROOT / "lessons")
    page = phone_or_desktop(new_page, lang, width, scheme)
    for exercise_id, (mistake, fix) in MISTAKES.items():
        exercise = course.exercise(exercise_id)
        page.goto(f"/lessons/{exercise.lesson}/exercises/{exercise.slug}?lang={lang}")
        page.locator(".cm-editor").wait_for()
        replace_code(page, (exercise.path / "mistakes" / f"{mistake}.py").read_text())
        page.locator("button[name=mode][value=submit]").click()
        failed = page.locator(".verdict-card.verdict-failed")
        failed.wait_for(timeout=GRADE_MS)
        diagnosis = failed.locator(".diagnosis")
        kicker = diagnosis.locator(".diagnosis-kicker").text_content().strip()  # (shown in capitals)
        assert kicker == WHAT_WENT_WRONG[lang], mistake
        assert diagnosis.locator("h4").inner_text() == messages.text(f"diagnosis.{mistake}.title", lang)
        assert fix in diagnosis.locator("p code").all_inner_texts(), "the fix, shown as code"
        assert overflow(page) <= 0, too_wide(page)
        shot(page, f"mistake-{mistake}-{lang}-{scheme}-{width}", failed)


@pytest.mark.parametrize(("lang", "width", "scheme"), AXES)
def test_the_hints_opened_are_still_open_after_a_reload(new_page, lang, width, scheme):
    """Quick (no grade): two hints opened, the page reloaded, the same two open and the third
    still offered; the hints cost no history entries (Back leaves the exercise)."""
    page = phone_or_desktop(new_page, lang, width, scheme)
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    entries = page.evaluate("history.length")
    for n in (1, 2):
        page.locator(".hint-next").click()
        page.locator(f"#hint-{n} .hint-body").wait_for()
    first_two = [page.locator(f"#hint-{n} .hint-body").inner_text() for n in (1, 2)]
    assert page.evaluate("history.length") == entries
    page.reload()
    page.locator(".cm-editor").wait_for()
    assert page.locator("html").get_attribute("lang") == lang
    assert [item.inner_text() for item in page.locator(".hint-item .hint-body").all()] == first_two
    assert "3" in page.locator(".hint-next").inner_text()
