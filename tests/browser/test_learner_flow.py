"""The learner's screen in a real browser: lesson, quick-check, editor, live grading by the real
worker, the verdict that names the mistake, drafts that survive a reload, pt-BR, accessibility."""

import re

import pytest

from app.config import ROOT
from tests.browser.conftest import shot

expect = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]'").expect

pytestmark = pytest.mark.browser

LESSON = "/lessons/gradient-accumulation"
EXERCISE = f"{LESSON}/exercises/accumulate"
FOLDER = ROOT / "lessons" / "02-gradient-accumulation" / "exercises" / "accumulate"
NOT_SCALED = (FOLDER / "mistakes" / "loss-not-scaled.py").read_text()
SOLUTION = (FOLDER / "solution.py").read_text()


def reference(lang: str) -> str:
    """The reference solution as a learner reading ``lang`` is shown it: its comments in that
    language where the folder has them (solution.<lang>.py), else solution.py."""
    translated = FOLDER / f"solution.{lang}.py"
    return (translated if translated.is_file() else FOLDER / "solution.py").read_text()


GRADE_MS = 240_000  # a cold grade on a busy 2-core machine


def replace_code(page, code: str) -> None:
    """Select everything in the editor and paste `code` in its place (typed key by key, the
    editor's auto-indent would indent what is already indented)."""
    page.evaluate("text => navigator.clipboard.writeText(text)", code)
    page.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Control+v")


def answer(page, question, option_id: str, verdict: str) -> None:
    form = page.locator(f"#quiz-{question.id}")
    form.locator(f"input[value='{option_id}']").check()
    form.get_by_role("button").click()
    expect(page.locator(f"#feedback-{question.id}")).to_have_class(re.compile(verdict))


def test_a_learner_reads_checks_fails_is_told_why_fixes_and_passes(new_page):
    from app.config import get_settings
    from app.lessons.course import load_course

    lesson = load_course(get_settings().lessons_dir).lesson("gradient-accumulation")
    page = new_page(viewport={"width": 1280, "height": 900})

    # read the core lesson, answer its quick-check wrong, then right
    page.goto(LESSON)
    assert page.locator("h1").inner_text() == lesson.text("en").title
    page.locator(".card").last.scroll_into_view_if_needed()
    question = lesson.questions[0]
    wrong = next(o for o in question.options if not o.correct)
    right = next(o for o in question.options if o.correct)
    answer(page, question, wrong.id, "is-wrong")
    answer(page, question, right.id, "is-right")
    for other in lesson.questions[1:]:
        answer(page, other, next(o for o in other.options if o.correct).id, "is-right")

    # the exercise: the editor enhances the textarea
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    assert page.locator("textarea#code").is_hidden()
    assert page.get_by_role("button", name=re.compile(r"Submit \(Ctrl\+Enter\)")).is_visible()
    assert "Esc then Tab" in page.locator("#editor-help").inner_text()

    # a loop that forgets to divide the loss, sent with the keyboard
    replace_code(page, NOT_SCALED)
    assert page.locator("textarea#code").input_value() == NOT_SCALED, "the textarea stays the truth"
    page.keyboard.press("Control+Enter")
    page.locator("#submission-status .status-line.is-waiting").wait_for()
    failed = page.locator(".verdict-card.verdict-failed")
    failed.wait_for(timeout=GRADE_MS)
    assert failed.locator(".verdict-title").inner_text() == "Not yet right"
    diagnosis = failed.locator(".diagnosis")
    assert diagnosis.locator("h4").inner_text() == "The loss is not divided by accum_steps"
    assert "4.00×" in diagnosis.inner_text(), "the explanation quotes the learner's own numbers"
    assert failed.locator(".check-failed").count() >= 1
    assert failed.locator(".figure-memory .bar-naive").count() == 1, "memory against the naive loop"
    assert failed.locator(".figure-steps").count() == 0, "3 steps against 3 is said, not drawn"
    assert "4.00×" in failed.locator(".figure-update .figure-summary").inner_text()
    assert "Attempt 1" in failed.locator(".verdict-sub").inner_text(), "numbered for this learner"
    assert "Not yet right" in page.locator("#status-announcer").inner_text(), "a screen reader hears it"
    assert page.locator("#history tbody tr").count() == 1
    shot(page, "verdict-failed-desktop-light", failed)
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="dark")
    shot(page, "verdict-failed-phone-dark")

    # the hints open one at a time
    page.get_by_role("link", name="Show hint 1 of 3").click()
    page.locator("#hint-1").wait_for()
    assert page.locator("#hint-2").count() == 0
    # the newly opened hint takes the focus once htmx has settled it
    expect(page.locator("#hint-1")).to_be_focused()

    # fix it and pass
    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="light")
    replace_code(page, SOLUTION)
    page.keyboard.press("Control+Enter")
    passed = page.locator(".verdict-card.verdict-passed")
    passed.wait_for(timeout=GRADE_MS)
    assert passed.locator(".verdict-title").inner_text() == "Passed"
    assert passed.locator(".check-failed").count() == 0
    assert page.locator("#history tbody tr").count() == 2
    assert page.locator("#history tbody tr a").all_inner_texts() == ["2", "1"]
    # the way on, and the reference beside the learner's code
    next_step = passed.locator(".next-step a[rel=next]")
    assert next_step.inner_text().startswith("Next exercise: ")
    assert "Exercise 1 of" in passed.locator(".next-step").inner_text()
    solution = passed.locator("details.solution[open] .compare pre")
    assert solution.count() == 2 and solution.nth(1).inner_text().strip() == SOLUTION.strip()
    assert page.locator(".cm-failing-mark").count() == 0
    shot(page, "verdict-passed-desktop-light", passed)
    page.emulate_media(color_scheme="dark")
    shot(page, "verdict-passed-desktop-dark")
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="light")
    shot(page, "verdict-passed-phone-light")

    # the submission page shows the code and the verdict
    page.locator("#history tbody tr").first.get_by_role("link").click()
    assert page.locator(".submitted-code pre").inner_text().strip() == SOLUTION.strip()
    assert page.locator(".verdict-card.verdict-passed").is_visible()

    # the course page shows the progress: the quick-check and the exercise passed
    page.goto("/")
    progress = page.locator(".course-card", has_text=lesson.text("en").title).inner_text()
    assert "Quick check: passed" in progress
    assert re.search(r"1 of \d+ exercises passed", progress), progress
    # the lesson ticks the exercise, and the next step leads on
    page.goto(LESSON)
    assert page.locator(".practice-list li").first.get_attribute("class") == "is-passed"
    page.goto(EXERCISE)
    page.locator(".verdict-card.verdict-passed .next-step a[rel=next]").click()
    page.wait_for_url(re.compile(r"/exercises/(?!accumulate)"))
    assert "Exercise 2 of" in page.locator(".exercise-position").text_content()


def test_a_draft_survives_a_reload_and_reset_asks_first(new_page):
    page = new_page()
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    page.locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.insert_text("\n# half-way through my loop\n")
    page.reload()  # at once: the browser's copy is written on every change
    page.locator(".cm-editor").wait_for()
    assert "# half-way through my loop" in page.locator(".cm-content").inner_text()
    page.locator("[data-draft-state]").filter(has_text="Draft saved").wait_for()  # and the server's

    # another tab without this browser's storage still gets the server's draft
    page.evaluate("localStorage.clear()")
    page.reload()
    page.locator(".cm-editor").wait_for()
    assert "# half-way through my loop" in page.locator("textarea#code").input_value()

    # Esc then Tab leaves the editor
    page.locator(".cm-content").click()
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.value") == "submit", "focus moved on to Submit"

    # reset asks first, then brings the starter back
    page.locator(".reset summary").click()
    page.get_by_role("button", name="Yes, reset my code").click()
    page.wait_for_url(re.compile(r"reset=1"))
    page.locator(".cm-editor").wait_for()
    assert "# half-way through my loop" not in page.locator(".cm-content").inner_text()


def test_in_portuguese_a_run_shows_losses_without_grading(new_page):
    page = new_page(locale="pt-BR")
    page.goto(f"{EXERCISE}?lang=pt-BR")
    page.locator(".cm-editor").wait_for()
    assert page.get_by_role("button", name=re.compile(r"Enviar \(Ctrl\+Enter\)")).is_visible()
    assert "Esc e depois Tab" in page.locator("#editor-help").inner_text()
    replace_code(page, SOLUTION)
    page.get_by_role("button", name="Rodar sem avaliar").click()
    ran = page.locator(".verdict-card.verdict-ran")
    ran.wait_for(timeout=GRADE_MS)
    assert ran.locator(".verdict-title").inner_text() == "Rodou"
    assert ran.locator(".checks").count() == 0, "a run is not graded"
    losses = ran.locator(".figure-losses tbody tr")
    assert losses.count() == 3  # the start and two optimizer steps (8 micro-batches, cycles of 4)
    assert "Após o passo 2" in losses.last.inner_text()
    shot(page, "run-pt-BR-desktop-light")


AXE = ROOT / "static" / "vendor" / "axe.min.js"


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("url", [LESSON, EXERCISE])
def test_no_serious_accessibility_violations(new_page, url, scheme):
    page = new_page(color_scheme=scheme)
    page.goto(url)
    if url == EXERCISE:
        page.locator(".cm-editor").wait_for()
    assert AXE.is_file()
    page.add_script_tag(url="/static/vendor/axe.min.js")  # by URL: the page's CSP forbids inline script
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    serious = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert serious == []
