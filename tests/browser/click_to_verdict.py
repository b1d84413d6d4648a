"""Click-to-verdict in Chromium through a real worker: the time from a click on Submit to the
verdict card on the page, over N quick submissions in a row (the accumulation exercise's
solution). A measurement, not a test: it prints p50 and p90.

    .venv/bin/python -m tests.browser.click_to_verdict [-n 20] [--postgres]

By default over a fresh SQLite file; --postgres: a throwaway PostgreSQL server, as the tests
start one (TREINO_TEST_DATABASE_URL, an empty database, when given)."""

import argparse
import statistics
import tempfile
from contextlib import ExitStack
from pathlib import Path

from tests.browser.conftest import CHROMIUM, serving
from tests.browser.test_learner_flow import EXERCISE, SOLUTION, replace_code
from tests.conftest import PG_BINDIR, PG_URL, _throwaway_postgres

# In the page: when Submit is clicked, and when a verdict card other than the last one appears.
ARM = """() => {
  const card = () => document.querySelector("#submission-status .verdict-card")
  window.__seen = card() ? card().getAttribute("aria-labelledby") : null
  window.__t0 = null; window.__t1 = null
  if (!window.__armed) {
    window.__armed = true
    document.addEventListener("click", (e) => {
      if (e.target.closest("button[value=submit]")) window.__t0 = performance.now()
    }, true)
    new MutationObserver(() => {
      const now = card()
      if (window.__t0 !== null && window.__t1 === null && now
          && now.getAttribute("aria-labelledby") !== window.__seen) window.__t1 = performance.now()
    }).observe(document.body, {subtree: true, childList: true})
  }
}"""


def measure(base_url: str, n: int, exercise: str | None = None) -> list[float]:
    from playwright.sync_api import sync_playwright

    url, solution = EXERCISE, SOLUTION
    if exercise:  # "lesson-slug/exercise", its solution from the course
        from app.config import get_settings
        from app.lessons.course import load_course

        found = load_course(get_settings().lessons_dir).exercise(exercise)
        assert found is not None, exercise
        lesson, name = exercise.split("/")
        url, solution = f"/lessons/{lesson}/exercises/{name}", Path(found.path, "solution.py").read_text()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--disable-dev-shm-usage"])
        context = browser.new_context(base_url=base_url, bypass_csp=True)  # wait_for_function evals
        context.grant_permissions(["clipboard-read", "clipboard-write"])
        page = context.new_page()
        page.goto(url)
        page.locator(".cm-editor").wait_for()
        replace_code(page, solution)
        times = []
        for i in range(n + 1):  # the first grade warms the worker up: not counted
            page.evaluate(ARM)
            page.locator("button[name=mode][value=submit]").click()
            page.wait_for_function("window.__t1 !== null", timeout=240_000)
            if i:
                times.append(page.evaluate("window.__t1 - window.__t0") / 1000)
        browser.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--exercise", help="lesson-slug/exercise (default: accumulate)")
    args = parser.parse_args()
    with ExitStack() as stack:
        if args.postgres:
            url = PG_URL or stack.enter_context(_throwaway_postgres(PG_BINDIR))
        else:
            url = f"sqlite:///{Path(stack.enter_context(tempfile.TemporaryDirectory())) / 'treino.db'}"
        base = stack.enter_context(serving(url))
        times = measure(base, args.n, args.exercise)
    cuts = statistics.quantiles(times, n=10, method="inclusive")
    print(
        f"{url.split(':')[0]}, {args.exercise or 'accumulate'}: "
        f"click-to-verdict over {len(times)} submissions: "
        f"p50 {statistics.median(times):.2f} s, p90 {cuts[8]:.2f} s, "
        f"min {min(times):.2f} s, max {max(times):.2f} s"
    )


if __name__ == "__main__":
    main()
