"""Progress: cards reached as they scroll into view, quick-checks passed, the course page's bars
and "continue where you left off", the JSON twin, and that nobody sees anyone else's."""

import pytest
from fastapi.testclient import TestClient

from contracts.languages import LANGS
from tests.conftest import PASSWORD, arm_csrf, html, sign_up

HTMX = {"HX-Request": "true"}


def _reach(client: TestClient, slug: str, *cards: int) -> None:
    for card in cards:
        assert client.post(f"/lessons/{slug}/cards/{card}", headers=HTMX).status_code == 200


def _pass_quiz(client: TestClient, lesson) -> None:
    for question in lesson.questions:
        client.post(
            f"/lessons/{lesson.slug}/quiz/{question.id}",
            data={"option": question.correct_option.id},
            headers=HTMX,
        )


def _progress(client: TestClient, **kwargs) -> dict:
    body = client.get("/api/progress", **kwargs).json()
    return {**body, "lessons": {p["lesson"]: p for p in body["lessons"]}}


def test_every_card_reports_itself_once_after_it_was_on_screen_for_a_moment(client, course):
    lesson = course.lesson("gradient-accumulation")
    page = html(client.get("/lessons/gradient-accumulation"))
    cards = page.select("ol.cards > li.card")
    assert len(cards) == len(lesson.text("en").cards)
    for i, card in enumerate(cards):
        assert card["hx-post"] == f"/lessons/gradient-accumulation/cards/{i}"
        # static/js/lesson.js sends card-read once the card was on screen for a moment
        assert (card["hx-trigger"], card["hx-swap"]) == ("card-read once", "none")
    assert page.select_one("script[src='/static/js/lesson.js']")


def test_reaching_a_card_updates_the_lessons_progress_out_of_band(client, course):
    total = len(course.lesson("bottleneck").text("en").core_cards)
    fragment = html(client.post("/lessons/bottleneck/cards/3", headers=HTMX))
    section = fragment.select_one("section#lesson-progress")
    assert section["hx-swap-oob"] == "true"
    label = section.select_one("label.progress-label")
    assert label.select_one("span").get_text(strip=True) == f"1 of {total} cards read"
    bar = section.select_one(f"progress#{label['for']}")
    steps = 2 + len(course.lesson("bottleneck").exercises)  # reading, the quick check, each exercise
    assert (float(bar["value"]), bar["max"]) == (pytest.approx(1 / total, abs=1e-3), str(steps))
    page = html(client.get("/lessons/bottleneck"))
    assert not page.select_one("#lesson-progress").has_attr("hx-swap-oob")
    assert float(page.select_one("#lesson-progress progress")["value"]) == pytest.approx(1 / total, abs=1e-3)


def test_without_htmx_a_card_post_records_and_answers_204(client):
    assert client.post("/lessons/bottleneck/cards/0").status_code == 204
    assert _progress(client)["lessons"]["bottleneck"]["cards_read"] == 1


@pytest.mark.parametrize(
    "url", ["/lessons/bottleneck/cards/99", "/lessons/bottleneck/cards/-1", "/lessons/nope/cards/0"]
)
def test_unknown_cards_are_404(client, url):
    assert client.post(url, headers=HTMX).status_code == 404


def test_a_malformed_card_is_a_422_in_the_learners_language(client):
    response = client.post("/lessons/bottleneck/cards/abc", params={"lang": "pt-BR"})
    assert response.status_code == 422
    assert html(response).select_one("h1").get_text(strip=True) == "Dados inválidos"


def test_a_quick_check_answer_updates_the_progress_out_of_band(client, course):
    lesson = course.lesson("bottleneck")
    question = lesson.questions[0]
    fragment = html(
        client.post(
            f"/lessons/bottleneck/quiz/{question.id}",
            data={"option": question.correct_option.id},
            headers=HTMX,
        )
    )
    assert fragment.select_one(f"#feedback-{question.id}")
    assert fragment.select_one("section#lesson-progress")["hx-swap-oob"] == "true"
    _pass_quiz(client, lesson)
    fragment = html(
        client.post(
            f"/lessons/bottleneck/quiz/{question.id}",
            data={"option": question.correct_option.id},
            headers=HTMX,
        )
    )
    assert "Quick check: passed" in fragment.select_one("#lesson-progress label").get_text(" ", strip=True)


def test_the_quiz_counts_as_answered_once_every_question_was_right_once(client, course):
    lesson = course.lesson("mixed-precision")
    first, *others = lesson.questions
    wrong = next(o for o in first.options if not o.correct)
    client.post(
        f"/lessons/{lesson.slug}/quiz/{first.id}", data={"option": first.correct_option.id}, headers=HTMX
    )
    client.post(f"/lessons/{lesson.slug}/quiz/{first.id}", data={"option": wrong.id}, headers=HTMX)
    row = _progress(client)["lessons"][lesson.slug]
    assert (row["quiz_questions_right"], row["quiz_answered"]) == (1, False)
    _pass_quiz(client, lesson)
    client.post(f"/lessons/{lesson.slug}/quiz/{first.id}", data={"option": wrong.id}, headers=HTMX)
    row = _progress(client)["lessons"][lesson.slug]
    assert (row["quiz_questions_right"], row["quiz_answered"]) == (len(lesson.questions), True)


def test_api_progress_lists_every_lesson(client, course):
    body = _progress(client)
    assert (body["signed_in"], body["resume"]) == (False, None)
    assert list(body["lessons"]) == [lesson.slug for lesson in course.lessons]
    for lesson in course.lessons:
        assert body["lessons"][lesson.slug] == {
            "lesson": lesson.slug,
            "title": lesson.text("en").title,
            "cards_total": len(lesson.text("en").core_cards),
            "cards_read": 0,
            "last_card": None,
            "quiz_questions": len(lesson.questions),
            "quiz_questions_right": 0,
            "quiz_answered": False,
            "exercises_total": len(lesson.exercises),
            "exercises_passed": [],
        }


@pytest.mark.parametrize("lang", LANGS)
def test_course_page_shows_a_labelled_bar_per_lesson_and_where_to_continue(client, course, lang):
    lesson = course.lesson("gradient-accumulation")
    _reach(client, lesson.slug, 0, 1, 2)
    page = html(client.get("/", params={"lang": lang}))
    bars = page.select(".course-card progress")
    assert len(bars) == len(course.lessons)
    for bar in bars:
        assert page.select_one(f"label[for={bar['id']}]").get_text(strip=True)
    index = [lsn.slug for lsn in course.lessons].index(lesson.slug)
    assert float(bars[index]["value"]) == pytest.approx(3 / len(lesson.text(lang).core_cards), abs=1e-3)
    assert bars[index]["max"] == str(2 + len(lesson.exercises))
    resume = page.select_one(".resume a")
    assert resume["href"] == f"/lessons/{lesson.slug}#{lesson.text(lang).cards[2].anchor}"
    assert page.select_one(".hint a")["href"] == "/sign-up", "anonymous progress invites an account"


def test_resume_moves_from_the_cards_to_the_quiz_to_the_first_exercise(client, course):
    lesson = course.lesson("gradient-accumulation")
    exercise = lesson.exercises[0]
    _reach(client, lesson.slug, *range(len(lesson.text("en").cards)))
    assert _progress(client)["resume"]["url"].endswith(f"/lessons/{lesson.slug}#quiz")
    _pass_quiz(client, lesson)
    url = f"/lessons/{lesson.slug}/exercises/{exercise.slug}"
    assert _progress(client)["resume"]["url"].endswith(url)
    page = html(client.get("/"))
    assert page.select_one(".resume a")["href"] == url
    assert exercise.title["en"] in page.select_one(".resume-where").get_text()


def test_a_new_visitor_is_invited_to_start(client):
    page = html(client.get("/"))
    assert page.select_one(".resume") is None
    assert page.select_one(".hero a.button")["href"] == "/lessons/mixed-precision"


# ---------------------------------------------------------------- isolation


def test_another_learner_sees_none_of_my_progress(db_client, db_app):
    course = db_app.state.course
    sign_up(db_client, "ana@example.com")
    _reach(db_client, "bottleneck", 0, 1)
    _pass_quiz(db_client, course.lesson("bottleneck"))
    mine = _progress(db_client)["lessons"]["bottleneck"]
    assert (mine["cards_read"], mine["quiz_answered"]) == (2, True)

    with TestClient(db_app) as other:
        arm_csrf(other)
        views = [_progress(other)]  # anonymous
        sign_up(other, "bea@example.com")
        views.append(_progress(other))  # another account, by cookie
        token = other.post(
            "/api/tokens",
            json={"email": "bea@example.com", "password": PASSWORD},
            headers={"Authorization": ""},
        ).json()["token"]
        with TestClient(db_app) as api:  # and by bearer token
            views.append(_progress(api, headers={"Authorization": f"Bearer {token}"}))
        for view in views:
            assert all(r["cards_read"] == 0 and not r["quiz_answered"] for r in view["lessons"].values())
        page = html(other.get("/lessons/bottleneck"))
        assert page.select_one("#lesson-progress progress")["value"] == "0"
        assert not page.select("form.question input:checked")

    db_client.post("/sign-out")  # the same browser, signed out: the account's rows are not shown
    assert _progress(db_client)["lessons"]["bottleneck"]["cards_read"] == 0


def test_a_passed_submission_counts_and_a_run_or_a_failure_does_not(client, app):
    from tests.submissions.test_routes import API_URL, grade_all

    def passed_ids():
        return _progress(client)["lessons"]["gradient-accumulation"]["exercises_passed"]

    assert client.post(API_URL, json={"code": "x", "mode": "run"}).status_code == 202
    grade_all(app)
    assert passed_ids() == [], "a run is not a pass"
    assert client.post(API_URL, json={"code": "x"}).status_code == 202
    grade_all(app)
    assert passed_ids() == ["gradient-accumulation/accumulate"]
