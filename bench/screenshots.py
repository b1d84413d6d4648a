"""Screenshots for people to look at (issue 29's closing note), taken in Debian's Chromium from the
tutor as deployed (bench.stack: a scratch SQLite database, `treino serve`, one `treino worker`),
into docs/screenshots/ (its README lists them):

- ``pass-<kind>.png``: for each exercise check kind, the first exercise of that kind in the course
  (the exercises tests/browser/test_reading_and_passing.py's KINDS names), its solution.py
  submitted and the verdict card that comes back, down to the comparison with the reference
  solution, English, light, 1280x800; a tall card in parts (``-checks``, ``-figures``);
- ``lesson-code-pt-BR-dark-390.png``: the lesson card whose code carries the point in a long comment
  (mixed precision, "underflow"), Portuguese, dark, 390x844;
- ``course-end-*.png``: the end of the course for a learner who did everything, every step through
  the app itself (each card reached, each quick check answered right, each exercise's solution
  submitted and passed): its first screen in English on the light desktop and in Portuguese on a
  dark phone, its "Where to go next" (desktop) and one lesson's results (phone).

    .venv/bin/python -m bench.screenshots [--out docs/screenshots]

Each picture is clipped (device scale 1) to keep the files small: about 150 KB at most."""

import argparse
import shutil
import sys
import time
from pathlib import Path

from playwright.sync_api import Browser, FloatRect, Page, ViewportSize, sync_playwright

from app.config import ROOT
from app.lessons.course import Course, Exercise, load_course
from bench.stack import Stack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
GRADE_MS = 300_000  # a cold grade on a busy 2-core machine
DESKTOP = ViewportSize(width=1280, height=800)
PHONE = ViewportSize(width=390, height=844)
TALL = 1200  # px: a verdict taller than this is saved in parts (about 150 KB)

# In the page: an unsafe request as htmx would send it (same origin, the page's CSRF token).
POST = """async ([url, form]) => {
  const headers = JSON.parse(document.body.getAttribute("hx-headers"))
  const response = await fetch(url, {method: "POST", headers, body: new URLSearchParams(form)})
  return response.status
}"""


def one_per_kind(course: Course) -> dict[str, Exercise]:
    """The first exercise of each check kind, in the course's order."""
    kinds: dict[str, Exercise] = {}
    for exercise in course.exercises:
        kinds.setdefault(exercise.check_kind, exercise)
    return kinds


def exercise_url(exercise: Exercise) -> str:
    return f"/lessons/{exercise.lesson}/exercises/{exercise.slug}"


def replace_code(page: Page, code: str) -> None:
    """Select everything in the editor and paste ``code`` (as tests/browser does: typed, the
    editor's auto-indent would indent what is already indented)."""
    page.evaluate("text => navigator.clipboard.writeText(text)", code)
    page.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Control+v")


def submit_solution(page: Page, exercise: Exercise) -> float:
    """Submit the exercise's solution.py on its page; wait for the pass. Seconds to the verdict."""
    page.goto(f"{exercise_url(exercise)}?lang=en")
    page.locator(".cm-editor").wait_for()
    replace_code(page, (exercise.path / "solution.py").read_text())
    clicked = time.monotonic()
    page.locator("button[name=mode][value=submit]").click()
    verdict = page.locator("#submission-status .verdict-card")
    verdict.wait_for(timeout=GRADE_MS)
    took = time.monotonic() - clicked
    if "verdict-passed" not in (verdict.get_attribute("class") or ""):
        raise RuntimeError(f"{exercise.id}: the solution did not pass:\n{verdict.inner_text()}")
    return took


def read_everything(page: Page, course: Course) -> None:
    """Every card reached and every quick check answered right, through the app's own routes."""
    for lesson in course.lessons:
        page.goto(f"/lessons/{lesson.slug}?lang=en")
        for card in range(len(lesson.text("en").cards)):
            status = page.evaluate(POST, [f"/lessons/{lesson.slug}/cards/{card}", {}])
            assert status in (200, 204), (lesson.slug, card, status)
        for question in lesson.questions:
            right = next(o for o in question.options if o.correct)
            status = page.evaluate(POST, [f"/lessons/{lesson.slug}/quiz/{question.id}", {"option": right.id}])
            assert status == 200, (lesson.slug, question.id, status)


def verdict_parts(page: Page) -> list[tuple[str, FloatRect]]:
    """The verdict card in the page's coordinates, down to where the comparison with the reference
    solution starts (code already shown elsewhere, and most of a file's bytes). A card taller than
    TALL comes in parts: what was measured apart ("-figures"), and the checks cut in two at the
    check nearest their middle ("-checks") when still taller (measure-it's card: 2,100 px)."""
    box = page.evaluate("""() => {
      const card = document.querySelector("#submission-status .verdict-card")
      const rect = card.getBoundingClientRect()
      const top = (el) => el ? el.getBoundingClientRect().top + scrollY : null
      return {x: rect.left + scrollX, width: rect.width, top: rect.top + scrollY,
              checks: [...card.querySelectorAll("ul.checks > li")].map(top),
              figures: top(card.querySelector("section.figures")),
              bottom: (top(card.querySelector("details.solution")) ?? rect.bottom + scrollY) - 4}
    }""")
    cuts = [("", box["top"])]
    if box["bottom"] - box["top"] > TALL and box["figures"] is not None:
        if box["figures"] - box["top"] > TALL:
            middle = (box["top"] + box["figures"]) / 2
            cuts.append(("-checks", min(box["checks"], key=lambda y: abs(y - middle)) - 4))
        cuts.append(("-figures", box["figures"] - 4))
    cuts.append(("", box["bottom"]))
    return [
        (suffix, FloatRect(x=box["x"], y=top, width=box["width"], height=bottom - top))
        for (suffix, top), (_, bottom) in zip(cuts, cuts[1:], strict=False)
    ]


def save(element_or_page, path: Path, **options) -> None:
    element_or_page.screenshot(path=str(path), animations="disabled", **options)
    print(f"{path.name}: {path.stat().st_size // 1024} KB")


def take(browser: Browser, base: str, out: Path, course: Course) -> None:
    # the learner: passes one exercise of each kind on a light desktop, in English
    context = browser.new_context(
        base_url=base, viewport=DESKTOP, color_scheme="light", locale="en", device_scale_factor=1
    )
    context.set_default_timeout(30_000)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.on("pageerror", lambda exc: print(f"JavaScript error: {exc}", file=sys.stderr))
    kinds = one_per_kind(course)
    for kind, exercise in kinds.items():
        took = submit_solution(page, exercise)
        print(f"{exercise.id} ({kind}): passed, verdict in {took:.1f} s")
        for suffix, clip in verdict_parts(page):
            save(page, out / f"pass-{kind}{suffix}.png", full_page=True, clip=clip)

    # ... then the rest of the course, so that its end is the end
    for exercise in course.exercises:
        if exercise not in kinds.values():
            took = submit_solution(page, exercise)
            print(f"{exercise.id}: passed, verdict in {took:.1f} s")
    read_everything(page, course)

    # the end of the course: its first screen, and one part of it further down (the whole page is
    # 3,400 px tall on the desktop, 7,200 px on a phone: over half a megabyte each)
    page.goto("/course/end?lang=en")
    page.locator(".course-end").wait_for()
    save(page, out / "course-end-en-light-1280.png")
    save(page.locator(".end-next"), out / "course-end-next-en-light-1280.png")
    page.set_viewport_size(PHONE)
    page.emulate_media(color_scheme="dark")
    page.goto("/course/end?lang=pt-BR")
    page.locator(".course-end").wait_for()
    save(page, out / "course-end-pt-BR-dark-390.png")
    save(page.locator(".end-lesson").nth(1), out / "course-end-lesson-pt-BR-dark-390.png")
    context.close()

    # a lesson card with long code on a dark phone, in Portuguese (a fresh visitor)
    phone = browser.new_context(
        base_url=base,
        viewport=PHONE,
        is_mobile=True,
        has_touch=True,
        color_scheme="dark",
        locale="pt-BR",
        device_scale_factor=1,
    )
    page = phone.new_page()
    page.goto("/lessons/mixed-precision?lang=pt-BR")
    code = page.locator(".card pre", has_text="underflow").first
    code.scroll_into_view_if_needed()
    save(code.locator("xpath=ancestor::li[1]"), out / "lesson-code-pt-BR-dark-390.png")
    phone.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()
    if not CHROMIUM:
        sys.exit("no chromium on PATH (make system-deps installs it)")
    args.out.mkdir(parents=True, exist_ok=True)
    course = load_course(ROOT / "lessons")
    with Stack("sqlite", pool_size=1) as stack, sync_playwright() as p:
        stack.add_worker()
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--disable-dev-shm-usage"])
        try:
            take(browser, stack.base, args.out, course)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
