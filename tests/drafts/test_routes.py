"""Drafts: saved by upsert, shown when the exercise reopens, owner-only, moved at sign-in."""

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.drafts.models import Draft
from tests.conftest import arm_csrf, html, sign_up

EXERCISE_URL = "/lessons/gradient-accumulation/exercises/accumulate"
DRAFT_URL = f"{EXERCISE_URL}/draft"


def textarea(client) -> str:
    return html(client.get(EXERCISE_URL)).select_one("textarea#code").get_text()


def test_a_saved_draft_wins_over_the_starter_and_is_one_row(db_client, db_app):
    assert db_client.get(DRAFT_URL).status_code == 404
    for code in ("first = 1", "second = 2"):
        saved = db_client.put(DRAFT_URL, json={"code": code})
        assert saved.status_code == 200 and saved.json()["code"] == code
    assert textarea(db_client) == "second = 2"
    page = html(db_client.get(EXERCISE_URL))
    assert page.select_one("textarea#code")["data-draft-at"] == db_client.get(DRAFT_URL).json()["updated_at"]
    with db_app.state.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Draft)) == 1


def test_submitting_makes_the_code_the_draft(client):
    client.post(f"{EXERCISE_URL}/submissions", data={"code": "sent = 3"}, headers={"HX-Request": "true"})
    assert client.get(DRAFT_URL).json()["code"] == "sent = 3"


def test_reset_asks_first_then_brings_the_starter_back(client, course):
    client.put(DRAFT_URL, json={"code": "mine = 1"})
    assert client.post(f"{DRAFT_URL}/reset").status_code == 422, "not without the confirmation"
    response = client.post(f"{DRAFT_URL}/reset", data={"confirm": "yes"}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].endswith("?reset=1")
    page = html(client.get(response.headers["location"]))
    starter = course.exercise("gradient-accumulation/accumulate").starter
    assert page.select_one("textarea#code").get_text() == starter
    assert page.select_one("textarea#code").has_attr("data-draft-reset")


def test_drafts_are_owner_only(client, app):
    client.put(DRAFT_URL, json={"code": "secret = 42"})
    with TestClient(app) as stranger:
        arm_csrf(stranger)
        assert stranger.get(DRAFT_URL).status_code == 404
        assert "secret = 42" not in stranger.get(EXERCISE_URL).text


def test_a_draft_follows_the_learner_to_another_device_after_sign_in(client, app):
    client.put(DRAFT_URL, json={"code": "on my laptop"})
    sign_up(client, "ana@example.com")
    assert textarea(client) == "on my laptop", "adopted at sign-up"
    with TestClient(app) as phone:
        arm_csrf(phone)
        assert textarea(phone) != "on my laptop"
        response = phone.post(
            "/sign-in",
            data={"email": "ana@example.com", "password": "correct horse battery staple"},
            follow_redirects=False,
        )
        assert response.status_code == 303
        assert textarea(phone) == "on my laptop"


def test_a_draft_larger_than_the_exercise_accepts_is_refused(client):
    assert client.put(DRAFT_URL, json={"code": "x" * (65 * 1024)}).status_code == 422
    assert client.put(DRAFT_URL, json={}).status_code == 422


def test_a_draft_needs_the_csrf_token(client):
    del client.headers["X-CSRF-Token"]
    assert client.put(DRAFT_URL, json={"code": "x"}).status_code == 403


def test_unknown_exercise_has_no_draft(client):
    url = "/lessons/gradient-accumulation/exercises/nope/draft"
    assert client.put(url, json={"code": "x"}).status_code == 404
