"""The learner's loop without friction, in a real browser: no page wider than a 360 px phone
(verdicts, charts and long code included), Cancel while waiting, a card read only after a moment
on screen, "Go further" folded, quiet quiz boxes, a way back in after a forgotten password and a
way out; in both languages, light and dark, with axe finding nothing serious."""

import pytest

from tests.browser.conftest import shot
from tests.browser.test_learner_flow import (
    EXERCISE,
    FOLDER,
    GRADE_MS,
    LESSON,
    NOT_SCALED,
    replace_code,
)

pytestmark = pytest.mark.browser

LONG_LINE = "    # " + "a_rather_long_name_" * 12 + "\n"  # wider than any phone


def overflow(page) -> int:
    """How many pixels the page is wider than the screen (0: no sideways scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")


def too_wide(page) -> list[str]:
    """The innermost elements that reach past the screen's right edge, to name in a failure."""
    return page.evaluate("""() => {
      const width = document.documentElement.clientWidth
      const out = [...document.querySelectorAll("body *")].filter((el) =>
        el.getBoundingClientRect().right > width + 0.5 &&
        ![...el.children].some((c) => c.getBoundingClientRect().right > width + 0.5))
      return out.slice(0, 5).map((el) => el.tagName.toLowerCase() + "." + [...el.classList].join(".")
        + " " + Math.round(el.getBoundingClientRect().right))
    }""")


def serious_axe(page) -> list:
    page.add_script_tag(url="/static/vendor/axe.min.js")
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [(v["id"], [n["target"] for n in v["nodes"]][:3])
            for v in result["violations"] if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize(("lang", "scheme"), [("en", "light"), ("pt-BR", "dark")])
def test_no_page_is_wider_than_a_phone_even_with_a_verdict_and_long_code(new_page, lang, scheme):
    page = new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                    color_scheme=scheme, locale=lang)
    page.goto(f"{EXERCISE}?lang={lang}")
    page.locator(".cm-editor").wait_for()
    code = NOT_SCALED.replace("\n", "\n" + LONG_LINE, 1)
    replace_code(page, code)
    page.locator("button[name=mode][value=submit]").click()
    verdict = page.locator(".verdict-card.verdict-failed")
    verdict.wait_for(timeout=GRADE_MS)
    if page.locator("details.output summary").count():
        page.locator("details.output summary").click()
    shot(page, f"phone-verdict-{lang}-{scheme}")
    verdict.scroll_into_view_if_needed()
    shot(page, f"phone-verdict-screen-{lang}-{scheme}", full_page=False)
    page.locator(".figures").scroll_into_view_if_needed()
    shot(page, f"phone-figures-screen-{lang}-{scheme}", full_page=False)
    submission = verdict.locator(".verdict-sub a").get_attribute("href")
    pages = ["/", LESSON, EXERCISE, submission, "/sign-in", "/sign-up", "/forgot-password"]
    for width in (390, 360):
        page.set_viewport_size({"width": width, "height": 800})
        for url in pages:
            page.goto(url)
            if url == EXERCISE:
                page.locator(".verdict-card").wait_for()
                page.locator(".cm-editor").wait_for()
            assert overflow(page) <= 0, f"{url} at {width} px: {overflow(page)} px too wide: {too_wide(page)}"
    page.goto(submission)
    code_box = page.locator(".submitted-code pre").bounding_box()
    assert code_box["x"] + code_box["width"] <= 360, "the code wraps instead of running off"
    assert page.locator(".submitted-code pre span").count() > 0, "highlighted"
    assert serious_axe(page) == []


def test_cancel_stops_the_wait_and_the_next_send_goes_at_once(new_page):
    page = new_page(viewport={"width": 1280, "height": 900})
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    endless = (FOLDER / "starter.py").read_text().replace(
        "def train(model, loader, loss_fn, optimizer, accum_steps):",
        "def train(model, loader, loss_fn, optimizer, accum_steps):\n    while True:\n        pass", 1)
    replace_code(page, endless)
    page.get_by_role("button", name="Run without grading").click()
    cancel = page.get_by_role("button", name="Cancel")
    cancel.wait_for(timeout=GRADE_MS)
    assert not page.locator(".verdict-mark").count()
    cancel.click()
    stopped = page.locator(".verdict-card.verdict-cancelled")
    stopped.wait_for()
    assert stopped.locator(".verdict-title").inner_text() == "Cancelled"
    assert stopped.locator(".verdict-mark svg").count() == 1
    # at once, not after the 60 s the endless loop would have had
    replace_code(page, (FOLDER / "solution.py").read_text())
    page.get_by_role("button", name="Run without grading").click()
    page.locator(".verdict-card.verdict-ran").wait_for(timeout=GRADE_MS)
    assert page.locator("#history tbody tr").count() == 2
    assert "Cancelled" in page.locator("#history tbody tr").nth(1).inner_text()


def test_a_card_is_read_after_a_moment_on_screen_and_go_further_is_folded(new_page):
    page = new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(LESSON)

    def cards_read() -> int:
        body = page.request.get("/api/progress").json()
        return next(p for p in body["lessons"] if p["lesson"] == "gradient-accumulation")["cards_read"]

    assert cards_read() == 0, "a page that merely opened has read nothing"
    page.wait_for_timeout(2500)
    first = cards_read()
    assert first >= 1, "the card on screen for a moment counts"
    # scrolling fast past the cards does not read them
    for card in page.locator("ol.cards > li.card").all()[:6]:
        card.scroll_into_view_if_needed()
        page.wait_for_timeout(100)
    page.locator("#quiz").scroll_into_view_if_needed()
    page.wait_for_timeout(2500)
    assert cards_read() <= first + 1
    # the quick check comes before "Go further", which is folded
    fold = page.locator("details#further")
    assert fold.get_attribute("open") is None
    quiz_y = page.locator("#quiz").bounding_box()["y"]
    assert fold.bounding_box()["y"] > quiz_y
    assert page.locator("details#further li.card").first.is_hidden()
    fold.locator("summary").click()
    assert page.locator("details#further li.card").first.is_visible()
    # unanswered questions show no empty box
    box = page.locator(".feedback").first.bounding_box()
    assert box is None or box["height"] == 0


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_a_right_answer_says_so_once(new_page, lang):
    from app.config import get_settings
    from app.lessons.content import load_course

    question = load_course(get_settings().lessons_dir).lesson("gradient-accumulation").questions[0]
    page = new_page(color_scheme="dark")
    page.goto(f"{LESSON}?lang={lang}")
    form = page.locator(f"#quiz-{question.id}")
    form.locator(f"input[value='{question.correct_option.id}']").check()
    form.get_by_role("button").click()
    feedback = page.locator(f"#feedback-{question.id}.is-right")
    feedback.wait_for()
    word = "Right." if lang == "en" else "Certo."
    text = feedback.inner_text()
    assert text.count("Right.") <= 1 and text.count(word) <= 1


@pytest.mark.parametrize(("width", "scheme"), [(390, "dark"), (1280, "light")])
def test_forgotten_password_without_mail_and_leaving_with_ones_data(new_page, width, scheme):
    page = new_page(viewport={"width": width, "height": 900}, color_scheme=scheme)
    email = f"leaver-{width}@example.com"
    page.goto("/sign-up")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill("four unrelated words here")
    page.get_by_role("button", name="Create account").click()
    page.goto("/sign-in")
    assert page.get_by_role("link", name="Forgot your password?").count() == 0  # signed in: redirected
    page.goto("/account")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download your data (JSON)").click()
    assert download.value.suggested_filename == "treino-account.json"
    assert serious_axe(page) == []
    page.locator("details.delete-account summary").click()
    page.get_by_label("Your password, to confirm").fill("four unrelated words here")
    page.get_by_role("button", name="Delete my account").click()
    assert page.locator("h1").inner_text() == "Your account is deleted"
    page.goto("/sign-in")
    page.get_by_role("link", name="Forgot your password?").click()
    assert "treino accounts reset-password" in page.locator(".notice").inner_text()
    assert overflow(page) <= 0
    assert serious_axe(page) == []

