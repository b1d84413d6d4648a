"""Ownership and adoption: every learner reads only their own rows, and signing up or in hands
the visitor's anonymous rows to the account (on SQLite and on PostgreSQL)."""

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.accounts.models import User
from app.accounts.ownership import Learner, adopt, owned_by, owned_tables
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from tests.conftest import arm_csrf, sign_in, sign_up

HTMX = {"HX-Request": "true"}


def _rows(app, model):
    with app.state.sessionmaker() as db:
        return db.scalars(select(model).order_by(model.id)).all()


def _do_things(client: TestClient, course, slug: str = "bottleneck") -> None:
    lesson = course.lesson(slug)
    client.post(f"/lessons/{slug}/cards/2", headers=HTMX)
    question = lesson.questions[0]
    client.post(
        f"/lessons/{slug}/quiz/{question.id}", data={"option": question.correct_option.id}, headers=HTMX
    )


def test_sign_up_adopts_everything_done_anonymously(db_client, db_app):
    course = db_app.state.course
    with TestClient(db_app) as stranger:  # another visitor's rows stay theirs
        _do_things(arm_csrf(stranger), course, "gpu-memory")
        stranger_visitor = stranger.cookies["treino_visitor"]
    _do_things(db_client, course)
    sign_up(db_client, "ana@example.com")
    user_id = _rows(db_app, User)[0].id
    for model in (QuizAttempt, CardReached):
        owners = {(row.visitor_id == stranger_visitor, row.user_id) for row in _rows(db_app, model)}
        assert owners == {(True, None), (False, user_id)}, model
    progress = db_client.get("/api/progress").json()
    bottleneck = next(p for p in progress["lessons"] if p["lesson"] == "bottleneck")
    assert (bottleneck["cards_read"], bottleneck["quiz_questions_right"]) == (1, 1)


def test_sign_in_on_another_device_adopts_that_devices_work(db_client, db_app):
    course = db_app.state.course
    sign_up(db_client, "ana@example.com")
    with TestClient(db_app) as phone:
        arm_csrf(phone)
        _do_things(phone, course, "gpu-memory")
        sign_in(phone, "ana@example.com")
    lessons = {p["lesson"]: p for p in db_client.get("/api/progress").json()["lessons"]}
    assert lessons["gpu-memory"]["cards_read"] == 1


def test_owned_by_separates_accounts_visitors_and_adopted_rows(db_app):
    with db_app.state.sessionmaker() as db, db.begin():
        ana = User(email="ana@example.com", password_hash="x")
        bea = User(email="bea@example.com", password_hash="x")
        db.add_all([ana, bea])
        db.flush()
        for owner in (
            {"user_id": ana.id, "visitor_id": "v1"},
            {"user_id": None, "visitor_id": "v1"},
            {"user_id": None, "visitor_id": "v2"},
            {"user_id": bea.id, "visitor_id": "v2"},
        ):
            db.add(CardReached(**owner, lesson="bottleneck", card=0))
    with db_app.state.sessionmaker() as db:

        def mine(learner):
            return sorted(
                (r.user_id, r.visitor_id)
                for r in db.scalars(select(CardReached).where(owned_by(CardReached, learner)))
            )

        assert mine(Learner("v1", ana)) == [(ana.id, "v1")]
        assert mine(Learner("v1")) == [(None, "v1")], "the account's rows stay hidden after sign-out"
        assert mine(Learner("v2")) == [(None, "v2")]
        assert mine(Learner("v9", bea)) == [(bea.id, "v2")]
        adopt(db, bea, "v1")
        db.commit()
        assert mine(Learner("v1")) == []
        assert mine(Learner("x", bea)) == [(bea.id, "v1"), (bea.id, "v2")]
        assert mine(Learner("x", ana)) == [(ana.id, "v1")]


def test_adoption_export_and_deletion_cover_every_table_of_a_learners_rows(app):
    assert [table.name for table in owned_tables()] == [
        "cards_reached",
        "drafts",
        "quiz_attempts",
        "submissions",
        "tutor_messages",
    ]
