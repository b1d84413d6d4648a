"""Quick-checks: feedback for the option chosen, with and without htmx; attempts stored; bad posts."""

import re

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lessons.course import load_course
from app.quizzes.models import QuizAttempt
from contracts.languages import LANGS
from tests.conftest import LESSONS, html

HTMX = {"HX-Request": "true"}
COURSE = load_course(LESSONS)
EVERY_OPTION = [
    pytest.param(lesson.slug, question.id, option.id, id=f"{lesson.slug}/{question.id}/{option.id}")
    for lesson in COURSE.lessons
    for question in lesson.questions
    for option in question.options
]


def _attempts(app) -> list[QuizAttempt]:
    with Session(app.state.sessionmaker.kw["bind"]) as session:
        return list(session.scalars(select(QuizAttempt).order_by(QuizAttempt.id)))


@pytest.mark.parametrize(("slug", "question_id", "option_id"), EVERY_OPTION)
def test_each_option_gets_its_own_explanation(client, course, slug, question_id, option_id):
    question = course.lesson(slug).question(question_id)
    option = question.option(option_id)
    response = client.post(f"/lessons/{slug}/quiz/{question_id}", data={"option": option_id}, headers=HTMX)
    assert response.status_code == 200
    fragment = html(response)
    feedback = fragment.select_one(f"#feedback-{question_id}")
    assert feedback["aria-live"] == "polite"
    assert ("is-right" if option.correct else "is-wrong") in feedback["class"]
    assert fragment.select_one(".explanation").decode_contents() == option.explanation_html["en"]
    assert not fragment.select("html, header, main"), "htmx gets a fragment, not a page"
    if option.correct:  # "Right." in bold, or the explanation's own "Right: …", never both
        bold = [s.get_text() for s in feedback.select(".verdict strong")]
        opens = bool(re.match(r"Right\b", fragment.select_one(".explanation").get_text()))
        assert (bold == ["Right."]) != opens, (bold, opens)


def test_htmx_answers_in_portuguese(client, course):
    question = course.lesson("gradient-accumulation").questions[0]
    wrong = next(o for o in question.options if not o.correct)
    client.get("/", params={"lang": "pt-BR"})
    fragment = html(
        client.post(
            f"/lessons/gradient-accumulation/quiz/{question.id}", data={"option": wrong.id}, headers=HTMX
        )
    )
    assert fragment.select_one(".verdict strong").get_text(strip=True) == "Ainda não."
    assert fragment.select_one(".explanation").decode_contents() == wrong.explanation_html["pt-BR"]


def test_without_javascript_the_post_returns_to_the_page_with_the_same_feedback(client, course, app):
    question = course.lesson("gradient-accumulation").questions[0]
    wrong = next(o for o in question.options if not o.correct)
    url = f"/lessons/gradient-accumulation/quiz/{question.id}"
    response = client.post(url, data={"option": wrong.id}, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].endswith(f"/lessons/gradient-accumulation#quiz-{question.id}")
    page = html(client.get(response.headers["location"]))
    form = page.select_one(f"form#quiz-{question.id}")
    assert form.select_one("input:checked")["value"] == wrong.id
    assert "is-wrong" in form.select_one(".feedback")["class"]
    assert form.select_one(".explanation").decode_contents() == wrong.explanation_html["en"]
    client.post(url, data={"option": question.correct_option.id})
    page = html(client.get("/lessons/gradient-accumulation"))
    assert "is-right" in page.select_one(f"form#quiz-{question.id} .feedback")["class"]


def test_attempts_are_stored_for_the_anonymous_visitor(client, app, course):
    question = course.lesson("bottleneck").questions[0]
    for option in question.options[:2]:
        client.post(f"/lessons/bottleneck/quiz/{question.id}", data={"option": option.id}, headers=HTMX)
    visitor = client.cookies["treino_visitor"]
    attempts = _attempts(app)
    assert [(a.visitor_id, a.lesson, a.question, a.option, a.correct) for a in attempts] == [
        (visitor, "bottleneck", question.id, o.id, o.correct) for o in question.options[:2]
    ]


def test_another_visitor_does_not_see_my_answers(client, app, course):
    question = course.lesson("bottleneck").questions[0]
    client.post(f"/lessons/bottleneck/quiz/{question.id}", data={"option": question.correct_option.id})
    client.cookies.clear()
    page = html(client.get("/lessons/bottleneck"))
    assert not page.select(f"form#quiz-{question.id} input:checked")
    assert not page.select(f"form#quiz-{question.id} .feedback.is-right")


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("htmx", [True, False])
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {},
            {
                "en": "Choose one of the answers, then check it.",
                "pt-BR": "Escolha uma das respostas e depois confira.",
            },
        ),
        (
            {"option": "not-an-option"},
            {
                "en": "That answer is not one of this question's options.",
                "pt-BR": "Essa resposta não é uma das opções desta pergunta.",
            },
        ),
    ],
)
def test_a_malformed_answer_is_a_clear_422(client, app, course, data, message, htmx, lang):
    question = course.lesson("mixed-precision").questions[0]
    response = client.post(
        f"/lessons/mixed-precision/quiz/{question.id}",
        data=data,
        params={"lang": lang},
        headers=HTMX if htmx else {},
    )
    assert response.status_code == 422
    feedback = html(response).select_one(f"#feedback-{question.id}")
    assert "is-error" in feedback["class"]
    assert feedback.get_text(strip=True) == message[lang]
    assert _attempts(app) == []


def test_an_overlong_option_is_a_422_page(client, course):
    question = course.lesson("mixed-precision").questions[0]
    response = client.post(f"/lessons/mixed-precision/quiz/{question.id}", data={"option": "x" * 500})
    assert response.status_code == 422
    assert html(response).select_one("h1").get_text(strip=True) == "Invalid input"


def test_an_oversized_body_is_refused_with_413(client, app, course):
    question = course.lesson("mixed-precision").questions[0]
    url = f"/lessons/mixed-precision/quiz/{question.id}"
    big = {"option": question.correct_option.id, "padding": "x" * (300 * 1024)}
    response = client.post(url, data=big)
    assert response.status_code == 413
    assert html(response).select_one("h1").get_text(strip=True) == "Too large"

    def chunks():  # no Content-Length: the limit still holds
        for _ in range(40):
            yield b"x" * 10_000

    response = client.post(
        url, content=chunks(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert response.status_code == 413
    assert _attempts(app) == []


def test_unknown_question_or_lesson_is_404(client):
    assert client.post("/lessons/bottleneck/quiz/nope", data={"option": "a"}).status_code == 404
    assert client.post("/lessons/nope/quiz/nope", data={"option": "a"}).status_code == 404


def test_a_get_on_the_answer_url_is_405_page(client, course):
    question = course.lesson("bottleneck").questions[0]
    response = client.get(f"/lessons/bottleneck/quiz/{question.id}")
    assert response.status_code == 405
    assert html(response).select_one("h1").get_text(strip=True) == "Method not allowed"
