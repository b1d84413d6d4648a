"""The classes' API: a teacher starts a class, learners join with its code and leave, and only
the class's teachers read its report; everyone else gets 404 (or 401 without a token)."""

from app.accounts.models import User
from app.classes.schemas import ClassReportOut
from app.submissions.models import Status
from tests.classes.conftest import EXERCISE, MISTAKE, graded, token


def _record(app, email: str, status: Status, mistake: str | None = None) -> None:
    with app.state.sessionmaker.begin() as s:
        graded(s, s.query(User).filter_by(email=email).one(), status, mistake)


def test_a_class_from_start_to_a_learner_leaving(db_client, db_app):
    teacher, ana, bia, outsider = (token(db_app, f"{n}@example.com") for n in ("t", "ana", "bia", "out"))
    created = db_client.post("/api/classes", json={"name": "DL 2026"}, headers=teacher)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["join_url"].endswith(f"/classes/join/{body['join_code']}")
    class_id = body["id"]

    joined = db_client.post("/api/classes/join", json={"code": body["join_code"]}, headers=ana)
    assert joined.status_code == 200 and joined.json() == {
        "id": class_id,
        "name": "DL 2026",
        "role": "learner",
    }
    assert db_client.post(
        "/api/classes/join", json={"code": body["join_code"], "name": "Bia"}, headers=bia
    ).is_success
    assert db_client.post("/api/classes/join", json={"code": "WRONGCODE"}, headers=bia).status_code == 404
    _record(db_app, "ana@example.com", Status.FAILED, MISTAKE)
    _record(db_app, "bia@example.com", Status.FAILED, MISTAKE)
    _record(db_app, "bia@example.com", Status.PASSED)
    _record(db_app, "out@example.com", Status.FAILED, MISTAKE)

    report = db_client.get(f"/api/classes/{class_id}", headers=teacher)
    assert report.status_code == 200, report.text
    data = report.json()
    assert ClassReportOut.model_validate(data).name == "DL 2026"  # the documented shape, exactly
    assert [(row["name"], row["exercises"][EXERCISE]) for row in data["learners"]] == [
        ("ana", {"status": "tried", "attempts": 1}),
        ("Bia", {"status": "passed", "attempts": 2}),
    ]
    assert data["exercises"][EXERCISE] == {"passed": 1, "attempted": 2, "mistakes": {MISTAKE: 2}}
    assert "gradient-accumulation/when-to-step" in data["questions"]

    for who in (ana, outsider):  # a learner of the class and a stranger: nothing to see
        assert db_client.get(f"/api/classes/{class_id}", headers=who).status_code == 404
    assert db_client.get(f"/api/classes/{class_id + 1}", headers=teacher).status_code == 404
    assert db_client.get(f"/api/classes/{class_id}").status_code == 401

    assert db_client.delete(f"/api/classes/{class_id}/members/me", headers=ana).status_code == 204
    assert db_client.delete(f"/api/classes/{class_id}/members/me", headers=ana).status_code == 404
    assert db_client.delete(f"/api/classes/{class_id}/members/me", headers=outsider).status_code == 404
    after = db_client.get(f"/api/classes/{class_id}", headers=teacher).json()
    assert [row["name"] for row in after["learners"]] == ["Bia"]
    assert after["exercises"][EXERCISE]["mistakes"] == {MISTAKE: 1}
    last = db_client.delete(f"/api/classes/{class_id}/members/me", headers=teacher)
    assert last.status_code == 409 and last.json()["code"] == "conflict"


def test_bad_input_is_refused_with_the_api_error_shape(client, app):
    teacher = token(app, "t@example.com")
    for body in ({}, {"name": ""}, {"name": "   "}, {"name": "x" * 121}, {"name": "a\x00b"}):
        response = client.post("/api/classes", json=body, headers=teacher)
        assert response.status_code == 422, body
        assert response.json()["code"] == "invalid_input"
    assert client.post("/api/classes/join", json={"code": ""}, headers=teacher).status_code == 422
    assert client.post("/api/classes", json={"name": "A"}).status_code == 401
