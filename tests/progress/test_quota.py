"""What visitors without an account can make the server keep of their quick-check answers and
cards reached is bounded per address (issue 43: every cookie-less request is a new visitor, so a
program could store answers without end): past TREINO_ANONYMOUS_ANSWERS_PER_CLIENT an answer is
still checked and the learner told it was not kept, in their language; another address and a
signed-in learner behind this one are not counted."""

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from tests.conftest import PASSWORD, arm_csrf, html, sign_up

HTMX = {"HX-Request": "true"}
NOT_KEPT = {"en": "checked but not kept", "pt-BR": "conferida, mas não guardada"}


@pytest.fixture
def quota_app(settings, _course):
    from app.main import create_app

    return create_app(settings.model_copy(update={"anonymous_answers_per_client": 3}), course=_course)


def _rows(app) -> int:
    with app.state.sessionmaker() as db:
        return sum(
            db.scalar(select(func.count()).select_from(model)) or 0 for model in (QuizAttempt, CardReached)
        )


def _visitor(app, peer: str) -> TestClient:
    """A new cookie-less visitor from ``peer``, its CSRF token armed as htmx sends it."""
    return arm_csrf(TestClient(app, client=(peer, 1)))


@pytest.mark.parametrize("lang", ["en", "pt-BR"])
def test_past_the_addresss_quota_an_answer_is_checked_and_said_not_kept(quota_app, course, lang):
    lesson = course.lesson("bottleneck")
    question = lesson.questions[0]
    right = question.correct_option

    def answer(client: TestClient):
        url = f"/lessons/{lesson.slug}/quiz/{question.id}"
        return html(client.post(url, params={"lang": lang}, data={"option": right.id}, headers=HTMX))

    for card in range(2):  # two cards reached and one answer: the address's three rows
        assert (
            _visitor(quota_app, "203.0.113.5").post(f"/lessons/{lesson.slug}/cards/{card}").status_code == 204
        )
    kept = answer(_visitor(quota_app, "203.0.113.5"))
    assert kept.select_one(".is-right") is not None and NOT_KEPT[lang] not in kept.get_text()
    assert _rows(quota_app) == 3

    refused = answer(_visitor(quota_app, "203.0.113.5"))
    assert refused.select_one(".is-right") is not None, "still checked"
    assert NOT_KEPT[lang] in refused.select_one(".notice").get_text()
    assert _visitor(quota_app, "203.0.113.5").post(f"/lessons/{lesson.slug}/cards/5").status_code == 204
    assert _rows(quota_app) == 3, "neither the answer nor the card was stored"

    assert NOT_KEPT[lang] not in answer(_visitor(quota_app, "198.51.100.5")).get_text(), "another address"
    with TestClient(quota_app, client=("203.0.113.5", 1)) as ana:
        arm_csrf(ana)
        sign_up(ana, f"ana-{lang}@example.com", PASSWORD)
        assert NOT_KEPT[lang] not in answer(ana).get_text(), "a signed-in learner's answers are the account's"
    assert _rows(quota_app) == 5
