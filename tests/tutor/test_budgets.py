"""The tutor's budgets hold under concurrency: many questions asked at once, past a budget, let
exactly the budget through (on SQLite and on PostgreSQL), for one learner and for many learners
behind one address. The budget's read is slowed down here so that, without the lock, every
asker would read the same count before any question is stored.

What an answer costs is known only when it ends, so a question reserves its whole possible cost
when asked and its answer settles to what it used however it ends: questions asked before any
answer is read spend at most the budget and one answer; a stream closed before its first token
pays its prompt; a learner has one answer on its way at a time; an answer whose process died is
settled once its time is up (issue 43)."""

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from app.db import utcnow
from app.main import create_app
from app.tutor import service
from app.tutor.models import TutorMessage
from tests.conftest import arm_csrf, sign_up
from tests.tutor.helpers import ASK, PAGE, STARTER_LIKE, events
from tests.tutor.test_cards import LESSON

ASKERS = 8
BUDGET = 3


@pytest.fixture
def slow_reads(monkeypatch):
    for name in ("_spent", "_on_its_way"):  # the budgets, then the answer on its way
        read = getattr(service, name)

        def slowly(*args, read=read, **kwargs):
            out = read(*args, **kwargs)
            time.sleep(0.05)  # a wide window between the budget's read and the question's insert
            return out

        monkeypatch.setattr(service, name, slowly)


@pytest.fixture
def tutor_app(database_url, _course):
    """``tutor_app(url=..., **settings)``: an app over this test's database (SQLite or
    PostgreSQL) whose tutor is at `url`; by default a URL nothing listens at, for tests whose
    questions never reach the model."""
    from tests.tutor.conftest import tutor_settings

    def make(url: str = "http://127.0.0.1:9/v1", **settings):
        return create_app(tutor_settings(database_url, url, **settings), course=_course)

    apps = []
    yield lambda *args, **settings: apps.append(make(*args, **settings)) or apps[-1]
    for app in apps:
        for factory in (app.state.sessionmaker, app.state.reader):
            factory.kw["bind"].dispose()


def _at_once(calls) -> list:
    """Run the calls in threads released together; their responses."""
    start = Barrier(len(calls))

    def go(call):
        start.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(go, calls))


def _codes(calls) -> list[int]:
    return [response.status_code for response in _at_once(calls)]


def _questions(app) -> int:
    with app.state.sessionmaker() as session:
        return session.scalar(
            select(func.count()).select_from(TutorMessage).where(TutorMessage.role == "learner")
        )


def test_one_learner_asking_at_once_gets_one_answer_the_others_are_told_why(tutor_app, slow_reads):
    """However many questions one learner sends at once (tabs, panels, a script), one answer is
    on its way; the budget cannot be raced from one account or visitor."""
    app = tutor_app(tutor_messages_per_hour=BUDGET)
    with TestClient(app) as client:
        arm_csrf(client)
        calls = [
            (lambda i=i: client.post(ASK, json={"question": f"q{i}", "code": STARTER_LIKE}))
            if i % 2
            else (lambda i=i: client.post(f"{LESSON}/cards/1/tutor", json={"question": f"q{i}"}))
            for i in range(ASKERS)
        ]  # on an exercise and on a card: one learner
        responses = _at_once(calls)
    codes = sorted(r.status_code for r in responses)
    assert codes == [202] + [409] * (ASKERS - 1), codes
    assert all("still answering" in r.json()["message"] for r in responses if r.status_code == 409)
    assert _questions(app) == 1


def test_learners_behind_one_address_asking_at_once_get_exactly_its_budget(tutor_app, slow_reads):
    app = tutor_app(tutor_messages_per_ip_hour=BUDGET)
    with TestClient(app):  # the app started once; a classroom: one visitor each, one IP
        clients = [arm_csrf(TestClient(app)) for _ in range(ASKERS)]
        codes = _codes(
            [lambda c=c: c.post(ASK, json={"question": "q", "code": STARTER_LIKE}) for c in clients]
        )
    assert sorted(codes) == [202] * BUDGET + [429] * (ASKERS - BUDGET), codes
    assert _questions(app) == BUDGET


def test_signed_in_learners_behind_one_address_have_budgets_of_their_own(tutor_app):
    """The address's budget is anonymous visitors' (each a fresh cookie away from a new one); a
    classroom of signed-in learners behind it asks under each learner's own."""
    app = tutor_app(tutor_messages_per_ip_hour=1, tutor_messages_per_hour=1)
    with TestClient(app):
        anonymous = arm_csrf(TestClient(app))
        assert anonymous.post(ASK, json={"question": "q", "code": STARTER_LIKE}).status_code == 202
        assert arm_csrf(TestClient(app)).post(ASK, json={"question": "q"}).status_code == 429
        for n in range(2):
            learner = arm_csrf(TestClient(app))
            sign_up(learner, f"learner{n}@class.example")
            assert learner.post(ASK, json={"question": "q", "code": STARTER_LIKE}).status_code == 202
            assert learner.post(ASK, json={"question": "again"}).status_code == 429, "their own budget"


# ---------------------------------------------------------------- reservations (issue 43)

ANSWER = {"prompt_tokens": 400, "completion_tokens": 100}  # what the fake model says each answer used
ONE_ANSWER = sum(ANSWER.values())
TOKENS = 1500
QUESTIONS = 12


def _charged(app) -> int:
    """The tokens the budgets count: used by answers that ended, held by those on their way."""
    cost = TutorMessage.prompt_tokens + TutorMessage.completion_tokens + TutorMessage.reserved_tokens
    with app.state.sessionmaker() as session:
        return session.scalar(select(func.coalesce(func.sum(cost), 0)).where(TutorMessage.role == "tutor"))


def _answer(app, response) -> TutorMessage:
    with app.state.sessionmaker() as session:
        return session.get(TutorMessage, response.json()["id"])


def _read(client, response) -> list[tuple[str, dict]]:
    stream = client.get(response.json()["stream"])
    assert stream.status_code == 200, stream.text
    return events(stream.text)


def test_one_visitor_asking_before_reading_spends_at_most_the_budget_and_one_answer(tutor_app, endpoint):
    """The issue's race: 12 questions, then the 12 answers read (6,000 tokens were charged
    against 1,500 when each answer was charged only as it ended)."""
    endpoint.script.usage = ANSWER
    app = tutor_app(endpoint.url, tutor_tokens_per_hour=TOKENS)
    with TestClient(app) as client:
        arm_csrf(client)
        asked = [client.post(ASK, json={"question": f"q{n}", "code": STARTER_LIKE}) for n in range(QUESTIONS)]
        assert [r.status_code for r in asked] == [202] + [409] * (QUESTIONS - 1)
        assert _read(client, asked[0])[-1][0] == "done"
        assert [_read(client, r) for r in asked[1:] if r.status_code == 202] == []
    assert _charged(app) <= TOKENS + ONE_ANSWER


def test_visitors_behind_one_address_asking_before_reading_spend_at_most_its_budget_and_one_answer(
    tutor_app, endpoint, slow_reads
):
    """Twelve fresh visitors behind one address (each with one answer on its way) ask at once,
    then read: a question reserves its prompt and the longest answer, so the address's budget
    lets through only what it can pay for (about 940 tokens reserved each here: two)."""
    endpoint.script.usage = ANSWER
    app = tutor_app(endpoint.url, tutor_tokens_per_ip_hour=TOKENS)
    with TestClient(app):
        clients = [arm_csrf(TestClient(app)) for _ in range(QUESTIONS)]
        asked = _at_once(
            [lambda c=c: c.post(ASK, json={"question": "q", "code": STARTER_LIKE}) for c in clients]
        )
        accepted = [(c, r) for c, r in zip(clients, asked, strict=True) if r.status_code == 202]
        assert 1 <= len(accepted) < QUESTIONS
        assert {r.status_code for r in asked} == {202, 429}
        reserved = _charged(app)
        assert reserved >= (len(accepted) - 1) * ONE_ANSWER and reserved < TOKENS + reserved / len(accepted)
        for c, r in accepted:
            assert _read(c, r)[-1][0] == "done"
    assert _charged(app) == len(accepted) * ONE_ANSWER <= TOKENS + ONE_ANSWER


def test_a_stream_closed_before_its_first_token_pays_its_prompt(tutor_app, endpoint):
    endpoint.script.first_delay = 30  # the model reads the prompt for a long while
    app = tutor_app(endpoint.url, tutor_max_tokens=400)
    with TestClient(app) as client:
        arm_csrf(client)
        asked = client.post(ASK, json={"question": "q", "code": STARTER_LIKE})
        prompt = _answer(app, asked).reserved_tokens - 400
        assert prompt > 0
        with client.stream("GET", asked.json()["stream"]) as stream:
            lines = stream.iter_lines()
            assert next(lines) == ": answering"
            deadline = time.monotonic() + 10  # the request reached the model: then the learner goes
            while not endpoint.script.requests:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        deadline = time.monotonic() + 15
        while (row := _answer(app, asked)).status == "running":
            assert time.monotonic() < deadline, "settled once the stream closed"
            time.sleep(0.05)
    assert row.status == "cancelled" and row.first_token_ms is None
    assert (row.prompt_tokens, row.completion_tokens, row.reserved_tokens) == (prompt, 0, 0)
    assert _charged(app) == prompt


@pytest.mark.parametrize(
    ("lang", "said"),
    [("en", "still answering your previous question"), ("pt-BR", "ainda está respondendo")],
)
def test_a_second_question_while_an_answer_streams_is_refused_and_says_why(tutor_app, endpoint, lang, said):
    endpoint.script.pieces = [f"word{n} " for n in range(40)]
    endpoint.script.delay = 0.05  # two seconds of answer
    app = tutor_app(endpoint.url)
    with TestClient(app) as client:
        arm_csrf(client)
        client.get(PAGE, params={"lang": lang})
        asked = client.post(ASK, json={"question": "q", "code": STARTER_LIKE})
        with client.stream("GET", asked.json()["stream"]) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))  # the first words came
            for again in (
                client.post(ASK, json={"question": "and?", "code": STARTER_LIKE}),
                client.post(f"{LESSON}/cards/1/tutor", json={"question": "and this card?"}),
            ):
                assert again.status_code == 409, again.text
                assert said in again.json()["message"]
            rest = "\n".join(lines)  # the answer on its way goes on to its end, whole
    assert _answer(app, asked).status == "answered"
    assert _answer(app, asked).content == "".join(endpoint.script.pieces)
    assert "event: done" in rest and len(endpoint.script.requests) == 1


def test_an_answer_its_process_never_settled_is_settled_once_its_time_is_up(tutor_app):
    """A process that died mid-answer leaves it `running`; a stream never read leaves it
    `pending`. Each holds the learner's turn and its reservation until its time (and a grace
    for its own process) has passed; then the next question settles it and goes through."""
    app = tutor_app(tutor_messages_per_hour=10)
    limit = service.time_limit(app.state.settings) + service.SETTLE_GRACE

    def age(response, by: timedelta) -> None:
        with app.state.sessionmaker.begin() as session:
            session.execute(
                update(TutorMessage)
                .where(TutorMessage.id == response.json()["id"])
                .values(created_at=utcnow() - by)
            )

    with TestClient(app) as client:
        arm_csrf(client)
        began = client.post(ASK, json={"question": "a", "code": STARTER_LIKE})
        with app.state.sessionmaker.begin() as session:  # claimed, then its process died
            session.execute(
                update(TutorMessage).where(TutorMessage.id == began.json()["id"]).values(status="running")
            )
        prompt = _answer(app, began).reserved_tokens - app.state.settings.tutor_max_tokens
        assert client.post(ASK, json={"question": "b", "code": STARTER_LIKE}).status_code == 409
        age(began, limit - timedelta(seconds=5))
        assert client.post(ASK, json={"question": "b", "code": STARTER_LIKE}).status_code == 409
        age(began, limit + timedelta(seconds=1))
        never_read = client.post(ASK, json={"question": "b", "code": STARTER_LIKE})
        assert never_read.status_code == 202
        row = _answer(app, began)
        assert row.status == "failed" and row.prompt is None
        assert (row.prompt_tokens, row.completion_tokens, row.reserved_tokens) == (prompt, 0, 0)

        age(never_read, limit + timedelta(seconds=1))
        assert client.get(never_read.json()["stream"]).status_code == 404, "too late to read"
        assert client.post(ASK, json={"question": "c", "code": STARTER_LIKE}).status_code == 202
        row = _answer(app, never_read)
        assert row.status == "failed" and (row.prompt_tokens, row.reserved_tokens) == (0, 0)


def test_an_answer_ends_within_its_time_from_the_question(tutor_app, endpoint):
    """TUTOR_TIMEOUT_SECONDS bounds the answer whatever it waits for (here a first word that
    never comes within it), so its reservation is settled by then."""
    endpoint.script.first_delay = 10
    app = tutor_app(endpoint.url, tutor_timeout_seconds=1, tutor_first_token_seconds=30)
    with TestClient(app) as client:
        arm_csrf(client)
        started = time.monotonic()
        asked = client.post(ASK, json={"question": "q", "code": STARTER_LIKE})
        evs = _read(client, asked)
        assert time.monotonic() - started < 5
    assert evs[-1][0] == "failed" and evs[-1][1]["kind"] == "slow"
    row = _answer(app, asked)
    assert row.status == "failed" and row.reserved_tokens == 0 and row.prompt_tokens > 0
