"""A class at once (issue 26): past forty requests in flight the web froze for 30 s. These hold
what fixed it (app/capacity.py, app/db.py), not timings: `make bench` measures those."""

import asyncio
import concurrent.futures
import shutil
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
import uvicorn
from anyio import to_thread
from sqlalchemy import text
from starlette.requests import Request

from app import capacity
from app.accounts import sessions
from app.accounts.models import User
from app.capacity import Gate, Sizes
from app.config import Settings
from app.db import get_session
from app.lessons.dependencies import get_course
from app.main import create_app
from tests.conftest import LESSONS, html
from tests.worker.test_queue import fake_verdict
from worker.runner import Worker

BASE = "http://t"
SUBMIT = "/api/lessons/gradient-accumulation/exercises/accumulate/submissions"
CODE = "def train(model, optimizer, batches, accum_steps):\n    pass\n"


def _run(coroutine):
    """asyncio.run on a thread of its own: the browser tests' Playwright keeps an event loop
    running on the main thread for the whole session, where asyncio.run refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_a_commit_never_waits_for_a_thread_that_runs_routes(sqlite_url):
    """The cause: every route thread waited for a pooled connection while the sessions holding
    the connections waited for a route thread to commit. Now, with every such thread taken,
    a session still commits."""
    app = create_app(Settings(database_url=sqlite_url, lessons_dir=LESSONS, _env_file=None))
    request = Request({"type": "http", "method": "POST", "app": SimpleNamespace(state=app.state)})

    async def commit_with_every_thread_taken() -> None:
        limiter = to_thread.current_default_thread_limiter()
        limiter.total_tokens = 1
        release = threading.Event()
        holder = asyncio.ensure_future(to_thread.run_sync(release.wait))
        await asyncio.sleep(0.05)
        assert limiter.borrowed_tokens == 1
        session_of_request = get_session(request)
        session = await anext(session_of_request)
        session.execute(text("CREATE TABLE committed (x INTEGER)"))
        ending = asyncio.ensure_future(anext(session_of_request))
        done, _ = await asyncio.wait({ending}, timeout=10)
        release.set()
        await holder
        with pytest.raises(StopAsyncIteration):
            await ending
        assert done, "the commit waited for a route thread"

    try:
        _run(commit_with_every_thread_taken())
        with app.state.reader() as session:
            assert session.execute(text("SELECT count(*) FROM committed")).scalar() == 0
    finally:
        for factory in (app.state.sessionmaker, app.state.reader):
            factory.kw["bind"].dispose()


# ---------------------------------------------------------------- the gate alone


class Held:
    """An ASGI app whose requests stay until released, answering 200."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.inside = 0
        self.order: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.inside += 1
        self.order.append(scope["method"])
        await self.release.wait()
        self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _ask(client: httpx2.AsyncClient, method: str, path: str = "/api/progress"):
    return asyncio.ensure_future(client.request(method, path))


def test_past_capacity_a_request_is_answered_503_with_retry_after_at_once():
    async def scenario() -> None:
        held = Held()
        gate = Gate(held, Sizes(1))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gate), base_url=BASE) as client:
            inside = _ask(client, "POST")
            waiting = [_ask(client, "POST") for _ in range(capacity.WAITING_PER_PLACE)]
            await asyncio.sleep(0.05)
            assert held.inside == 1 and gate.waiting == capacity.WAITING_PER_PLACE
            started = time.monotonic()
            refused = await client.post("/api/progress")
            assert time.monotonic() - started < 1
            assert refused.status_code == 503
            assert refused.json()["code"] == "busy"
            assert int(refused.headers["Retry-After"]) >= 1
            held.release.set()
            answers = await asyncio.gather(inside, *waiting)
            assert [a.status_code for a in answers] == [200] * (1 + capacity.WAITING_PER_PLACE)
            assert gate.free == 1 and gate.waiting == 0

    _run(scenario())


def test_reads_go_ahead_of_writes_and_health_and_static_files_pass_the_gate():
    async def scenario() -> None:
        held = Held()
        gate = Gate(held, Sizes(1))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gate), base_url=BASE) as client:
            first = _ask(client, "POST")
            await asyncio.sleep(0.02)
            later = [_ask(client, "POST"), _ask(client, "POST")]
            await asyncio.sleep(0.02)
            read = _ask(client, "GET")
            await asyncio.sleep(0.02)
            passing = [_ask(client, "GET", "/healthz"), _ask(client, "GET", "/static/css/app.css")]
            await asyncio.sleep(0.02)
            assert held.inside == 3  # the held one and the two ungated
            held.release.set()
            await asyncio.gather(first, read, *later, *passing)
            assert held.order == ["POST", "GET", "GET", "GET", "POST", "POST"]

    _run(scenario())


def test_a_request_that_would_wait_past_its_patience_is_refused_then(monkeypatch):
    monkeypatch.setattr(capacity, "PATIENCE", 0.2)

    async def scenario() -> None:
        held = Held()
        gate = Gate(held, Sizes(1))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gate), base_url=BASE) as client:
            inside = _ask(client, "POST")
            await asyncio.sleep(0.02)
            started = time.monotonic()
            late = await client.post("/api/progress")
            assert late.status_code == 503 and 0.15 < time.monotonic() - started < 1.5
            assert gate.waiting == 0  # it left the queue
            held.release.set()
            assert (await inside).status_code == 200
            assert gate.free == 1

    _run(scenario())


class Slow:
    """An ASGI app whose every request takes ``seconds`` inside, all at once (as threads)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def __call__(self, scope, receive, send) -> None:
        await asyncio.sleep(self.seconds)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def test_a_class_the_process_can_serve_in_time_waits_its_turn_and_no_one_is_sent_away():
    """Eight inside at a time, each 0.05 s: a hundred at once are all served, the last let in
    after about 0.6 s, well inside PATIENCE on a busy machine too. The pace is a place freed
    every 6.25 ms, not the 0.05 s one request takes inside: taking that for the pace sent most
    of a class away (issue 26)."""

    async def scenario() -> None:
        gate = Gate(Slow(0.05), Sizes(8))
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=gate), base_url=BASE) as client:
            answers = await asyncio.gather(*(_ask(client, "POST") for _ in range(100)))
            assert [a.status_code for a in answers].count(503) == 0
            assert 0.005 < gate.pace < 0.03

    _run(scenario())


# ---------------------------------------------------------------- the busy answer, as learners read it


def test_the_busy_answer_says_so_in_the_learners_language_and_the_editor_keeps_the_code(
    settings, _course, monkeypatch
):
    """The page (and the editor's Submit, an htmx request) says the tutor is busy, in English
    and Portuguese; the fragment replaces only the status, not the editor."""
    monkeypatch.setattr(capacity, "PATIENCE", 0.1)
    app = create_app(settings, course=_course)
    entered = asyncio.Event()
    release = asyncio.Event()

    async def held_course():
        entered.set()
        await release.wait()
        return _course

    app.dependency_overrides[get_course] = held_course  # each lesson page holds its place

    async def scenario() -> list[httpx2.Response]:
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            holding = [
                _ask(client, "GET", "/lessons/gradient-accumulation") for _ in range(settings.web_concurrency)
            ]
            await entered.wait()
            await asyncio.sleep(0.2)
            editor = await client.post(
                "/lessons/gradient-accumulation/exercises/accumulate/submissions",
                data={"code": CODE},
                headers={"HX-Request": "true"},
            )
            page = await client.get("/lessons/gradient-accumulation", headers={"Accept-Language": "pt-BR"})
            api = await client.post(SUBMIT, json={"code": CODE})
            release.set()
            await asyncio.gather(*holding)
            return [editor, page, api]

    editor, page, api = _run(scenario())
    for response in (editor, page, api):
        assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    status = html(editor).select_one("#submission-status")
    assert status is not None and "busy" in status.get_text() and "still here" in status.get_text()
    title = html(page).h1
    assert title is not None and title.get_text(strip=True) == "O tutor está ocupado"
    assert page.headers["Content-Language"] == "pt-BR"
    assert api.json()["code"] == "busy"
    for factory in (app.state.sessionmaker, app.state.reader):
        factory.kw["bind"].dispose()


# ---------------------------------------------------------------- a class through uvicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LEARNERS = 60  # past the forty that froze it
CONCURRENCY = 2  # so that most of the class waits at the gate, or is sent away and comes back


def test_a_class_at_once_is_answered_and_every_submission_graded(
    tmp_path_factory, _sqlite_template: Path, _course
):
    """Sixty learners (an account and an address each) press Submit together against uvicorn
    with two places: each is answered 202, or 503 with Retry-After and then 202 after it; no
    other 5xx, nothing unanswered; every submission is graded."""
    db = tmp_path_factory.mktemp("class") / "treino.db"
    shutil.copyfile(_sqlite_template, db)
    settings = Settings(
        database_url=f"sqlite:///{db}",
        lessons_dir=LESSONS,
        web_concurrency=CONCURRENCY,
        forwarded_allow_ips="127.0.0.1",
        _env_file=None,
    )
    app = create_app(settings, course=_course)
    with app.state.sessionmaker.begin() as session:
        tokens = []
        for n in range(LEARNERS):
            user = User(email=f"learner{n}@class.example", password_hash="!", lang="en")
            session.add(user)
            session.flush()
            tokens.append(sessions.start_session(session, user, kind="api", visitor_id=f"v{n}"))
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    answers: list[tuple[int, str | None]] = []

    async def learner(client: httpx2.AsyncClient, n: int, start: asyncio.Event) -> int:
        headers = {"Authorization": f"Bearer {tokens[n]}", "X-Forwarded-For": f"10.0.{n // 256}.{n % 256}"}
        await start.wait()
        while True:
            response = await client.post(SUBMIT, json={"code": CODE}, headers=headers)
            answers.append((response.status_code, response.headers.get("Retry-After")))
            if response.status_code != 503:
                assert response.status_code == 202, response.text
                return response.json()["id"]
            await asyncio.sleep(int(response.headers["Retry-After"]))

    async def the_class() -> list[int]:
        limits = httpx2.Limits(max_connections=None, keepalive_expiry=2)
        async with httpx2.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=20, limits=limits
        ) as client:
            start = asyncio.Event()
            pressing = [asyncio.ensure_future(learner(client, n, start)) for n in range(LEARNERS)]
            await asyncio.sleep(0.1)
            start.set()
            return await asyncio.wait_for(asyncio.gather(*pressing), 120)

    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        ids = _run(the_class())
        assert {status for status, _ in answers} <= {202, 503}
        assert all(after and int(after) >= 1 for status, after in answers if status == 503)
        assert sum(status == 202 for status, _ in answers) == LEARNERS
        with Worker(settings, grade=fake_verdict, course=_course) as worker:
            grading = threading.Thread(target=worker.run, daemon=True)
            grading.start()
            deadline = time.monotonic() + 120
            while True:
                with app.state.reader() as session:
                    statuses = session.scalars(text("SELECT status FROM submissions")).all()
                if statuses.count("passed") == LEARNERS or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            worker.stopping.set()
            grading.join(10)
        assert len(set(ids)) == LEARNERS and sorted(statuses) == ["passed"] * LEARNERS
    finally:
        server.should_exit = True
        serving.join(10)
        for factory in (app.state.sessionmaker, app.state.reader):
            factory.kw["bind"].dispose()


# ---------------------------------------------------------------- slow clients (issue 43)


def _serve_in_thread(app, **options):
    """uvicorn as `treino serve` runs it (app/capacity.py's server options), on a free port."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **options))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    return server, thread, port


def _slow_client(port: int, request: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(request)
    return s


def _answer(s: socket.socket, seconds: float = 30) -> bytes:
    """What the server sent before it closed the connection."""
    s.settimeout(seconds)
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    return got


@pytest.fixture
def slow_site(sqlite_url, _course):
    """The app served by uvicorn with two places, and bodies and headers due within 1 s."""
    settings = Settings(database_url=sqlite_url, lessons_dir=LESSONS, web_concurrency=2, _env_file=None)
    settings.request_seconds = 1.0
    app = create_app(settings, course=_course)
    server, thread, port = _serve_in_thread(app, **capacity.server_options(settings.request_seconds))
    yield port
    server.should_exit = True
    thread.join(10)
    for factory in (app.state.sessionmaker, app.state.reader):
        factory.kw["bind"].dispose()


DRAFT_PUT = (
    b"PUT /lessons/gradient-accumulation/exercises/accumulate/draft HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
)


def test_get_answers_200_while_16_slow_bodies_are_open(slow_site):
    """Sixteen clients send a draft's headers and then its body a byte at a time, eight times
    the places there are: the learner's page is answered 200 all along, since a body is read
    before its request takes a place; each slow one is cut with 408 once its time is up.
    (Before, the slow bodies held every place and the page was 503 for as long as they went
    on; `python -m bench.hostile slow` has the figures.)"""
    port = slow_site
    slow = [_slow_client(port, DRAFT_PUT) for _ in range(16)]
    for s in slow:
        s.sendall(b"{")
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as learner:
        for _ in range(3):
            assert learner.get("/").status_code == 200
            for s in slow:
                s.sendall(b" ")
    for s in slow:
        answer = _answer(s)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert b"connection: close" in answer.lower()
        s.close()


def test_a_body_that_never_ends_is_answered_408_in_the_visitors_language(slow_site):
    s = _slow_client(slow_site, DRAFT_PUT.replace(b"Host:", b"Accept-Language: pt-BR\r\nHost:") + b'{"co')
    answer = _answer(s).decode()
    assert answer.startswith("HTTP/1.1 408 ")
    assert "Muito lento" in answer and "Nada do que você enviou foi guardado" in answer
    s.close()


def test_headers_sent_a_byte_at_a_time_are_cut_with_408(slow_site):
    s = _slow_client(slow_site, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    s.sendall(b"X-Slow: ")
    for _ in range(5):  # past the second the headers had, a byte every 0.3 s
        time.sleep(0.3)
        try:
            s.sendall(b"x")
        except OSError:
            break
    assert _answer(s).startswith(b"HTTP/1.1 408 ")
    s.close()
