"""A teacher's view of a class in a real browser, through a real grader (issue 46): a teacher
starts a class; three learners open its link without an account, are asked for one first, are
told what the teacher will see, join and submit (one passes, two forget to divide the loss); the
class page, never reloaded, shows "2" beside that mistake; a learner who leaves disappears from
it; an outsider gets 404 for the page, the API, the CSV and each learner's submissions. In both
languages, 390 px and desktop, light and dark. Screenshots and the page's text are kept in
test-results/ (class-<lang>.png, class-<lang>.txt)."""

import pytest

from tests.browser.conftest import RESULTS, shot
from tests.browser.test_accounts import submit
from tests.browser.test_learner_flow import EXERCISE, GRADE_MS, NOT_SCALED, SOLUTION, replace_code
from tests.browser.test_loop import overflow, too_wide

pytestmark = pytest.mark.browser

PASSWORD = "four unrelated words here"
MISTAKE = "loss-not-scaled"
EXERCISE_ID = "gradient-accumulation/accumulate"
WORDS = {
    "en": {
        "first": "create an account first",
        "sees": "What the teachers will see",
        "join": "Join the class",
        "leave": "Leave {name}",
        "title": "The loss is not divided by accum_steps",
    },
    "pt-BR": {
        "first": "crie uma conta antes",
        "sees": "O que os professores vão ver",
        "join": "Entrar na turma",
        "leave": "Sair de {name}",
        "title": None,  # the catalogue's Portuguese title, read from the page
    },
}


def _sign_up(page, lang: str, email: str) -> None:
    page.goto(f"/sign-up?lang={lang}")
    submit(page, "/sign-up", email=email, password=PASSWORD)


def _send(page, code: str, verdict: str) -> None:
    page.goto(EXERCISE)
    page.locator(".cm-editor").wait_for()
    replace_code(page, code)
    page.locator("button[name=mode][value=submit]").click()
    page.locator(f".verdict-card.{verdict}").wait_for(timeout=GRADE_MS)


@pytest.mark.parametrize(("lang", "width", "scheme"), [("en", 390, "dark"), ("pt-BR", 1280, "light")])
def test_a_class_page_counts_a_shared_mistake_live_and_shows_nothing_to_others(new_page, lang, width, scheme):
    words = WORDS[lang]
    options = {
        "viewport": {"width": width, "height": 900},
        "color_scheme": scheme,
        "locale": lang,
        "service_workers": "block",
    }
    tag = f"{lang}-{width}"
    teacher = new_page(**options)
    _sign_up(teacher, lang, f"teacher-{tag}@example.com")
    teacher.goto("/classes")
    submit(teacher, "/classes", name=f"Deep learning {tag}")
    class_path = teacher.evaluate("location.pathname")
    join_url = teacher.locator("#join-url").input_value()
    teacher.evaluate("window.__not_reloaded = true")

    learners = {}
    for name in ("Ana", "Bia", "Caio"):
        page = new_page(**options)
        page.goto(f"{join_url}?lang={lang}")
        assert words["first"] in page.locator("main").inner_text()
        assert words["sees"] in page.locator("main").inner_text()  # said before any account
        assert overflow(page) == 0, too_wide(page)
        with page.expect_navigation():
            page.locator(".class-join a.button").click()  # to sign up, and back here after
        submit(page, "/sign-up", email=f"{name.lower()}-{tag}@example.com", password=PASSWORD)
        assert page.evaluate("location.pathname").startswith("/classes/join/")
        page.locator("#name").fill(name)
        with page.expect_navigation():
            page.get_by_role("button", name=words["join"]).click()
        learners[name] = page

    _send(learners["Ana"], SOLUTION, "verdict-passed")
    _send(learners["Bia"], NOT_SCALED, "verdict-failed")
    _send(learners["Caio"], NOT_SCALED, "verdict-failed")

    # the teacher's page, open all along, catches up by itself
    mistake = teacher.locator(f'[data-exercise="{EXERCISE_ID}"] [data-mistake="{MISTAKE}"]')
    mistake.locator(".mistake-count", has_text="2").wait_for(timeout=30_000)
    title = mistake.locator(".mistake-title").inner_text()
    assert title == words["title"] if words["title"] else title not in (MISTAKE, WORDS["en"]["title"])
    rows = teacher.locator(".class-grid tbody tr")
    assert rows.count() == 3
    assert teacher.locator(".class-grid tbody tr", has_text="Ana").locator("td.passed").count() == 1
    assert teacher.evaluate("window.__not_reloaded === true")
    assert overflow(teacher) == 0, too_wide(teacher)
    shot(teacher, f"class-{lang}")
    RESULTS.joinpath(f"class-{lang}.txt").write_text(teacher.locator("main").inner_text(), encoding="utf-8")

    # Caio leaves: gone from the grid and the count, still without a reload
    mistake.locator("summary").click()  # the teacher reads the verdict as a learner saw it
    assert mistake.locator("blockquote").inner_text()
    caio = learners["Caio"]
    caio.goto("/classes")
    assert overflow(caio) == 0, too_wide(caio)
    with caio.expect_navigation():
        caio.get_by_role("button", name=words["leave"].format(name=f"Deep learning {tag}")).click()
    teacher.locator(".class-grid tbody tr", has_text="Caio").wait_for(state="detached", timeout=30_000)
    # the grid and the mistakes are swapped apart: each waited for, as a slow machine needs
    mistake.locator(".mistake-count", has_text="1").wait_for(timeout=30_000)
    mistake.locator("details[open]").wait_for(timeout=30_000)  # still open after the swap
    assert teacher.evaluate("window.__not_reloaded === true")

    # an outsider (signed in, not the class's teacher) and a learner of it: 404 everywhere
    bia_id = teacher.locator(".class-grid tbody tr", has_text="Bia").get_attribute("data-learner")
    outsider = new_page(**options)
    _sign_up(outsider, lang, f"outsider-{tag}@example.com")
    class_id = class_path.rsplit("/", 1)[1]
    for page in (outsider, learners["Bia"]):
        for path in (class_path, f"{class_path}/export.csv", f"{class_path}/learners/{bia_id}"):
            assert page.request.get(path).status == 404, path
        assert page.request.get(f"/api/classes/{class_id}").status == 404
        response = page.goto(class_path)
        assert response is not None and response.status == 404
    # the teacher reads Bia's code, read-only
    teacher.goto(f"{class_path}/learners/{bia_id}")
    teacher.locator(".class-submission details summary").first.click()
    assert "loss" in teacher.locator(".class-submission pre").first.inner_text()
    assert overflow(teacher) == 0, too_wide(teacher)  # the code scrolls inside its box
