"""Driving the running tutor over HTTP: submissions to a verdict, page load, queue throughput."""

import asyncio
import itertools
import time
from datetime import UTC, datetime

import httpx2
from sqlalchemy import select

from app.submissions.models import Submission
from bench import settle
from bench.stack import Stack
from contracts.verdict import STATUSES

POLL_SECONDS = 0.05
FINAL = frozenset(STATUSES)  # a verdict is in


_LEARNERS = itertools.count()


def address(n: int) -> str:
    """Learner ``n``'s own client address, sent as X-Forwarded-For through the trusted local
    proxy (the bench connects from 127.0.0.1, which the stack's TREINO_FORWARDED_ALLOW_IPS trusts)."""
    return f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


def new_client(stack: Stack) -> httpx2.Client:
    """A new learner on a machine of its own: its own cookie jar and client address, so the
    anonymous fair-use cap per address (TREINO_QUEUED_PER_CLIENT) is each learner's, as in a class."""
    return httpx2.Client(
        base_url=stack.base,
        timeout=30,
        trust_env=False,
        headers={"X-Forwarded-For": address(next(_LEARNERS))},
    )


def submit(client: httpx2.Client, exercise_id: str, code: str) -> int:
    lesson, exercise = exercise_id.split("/")
    response = client.post(f"/api/lessons/{lesson}/exercises/{exercise}/submissions", json={"code": code})
    if response.status_code != 202:
        raise RuntimeError(f"submission refused: {response.status_code} {response.text[:200]}")
    return response.json()["id"]


def verdict(client: httpx2.Client, submission: int, timeout: float = 300) -> dict:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        response = client.get(f"/api/submissions/{submission}")
        if response.status_code != 200:
            raise RuntimeError(f"submission {submission}: {response.status_code} {response.text[:300]}")
        body = response.json()
        if body["status"] in FINAL:
            return body
        time.sleep(POLL_SECONDS)
    raise RuntimeError(f"submission {submission} not final after {timeout:.0f} s")


def end_to_end(stack: Stack, exercise_id: str, code: str, runs: int) -> list[float]:
    """Submit → final verdict, in ms, one learner at a time, each once the pools are warm (a
    learner who reads between submissions)."""
    times = []
    for _ in range(runs):
        for worker in stack.workers:
            settle.wait_quiet(worker.pid, stack.warm)
            worker.check()
        with new_client(stack) as client:
            started = time.perf_counter()
            body = verdict(client, submit(client, exercise_id, code))
            times.append((time.perf_counter() - started) * 1000)
        if body["status"] != "passed":
            raise RuntimeError(f"the solution was {body['status']}: {body['verdict']}")
    return times


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def job_times(stack: Stack) -> list[tuple[datetime, datetime, datetime]]:
    """(enqueued, claimed, finished) of every finished submission, oldest first."""
    engine = stack.database()
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(Submission.created_at, Submission.started_at, Submission.finished_at)
                .where(Submission.finished_at.is_not(None))
                .order_by(Submission.id)
            ).all()
    finally:
        engine.dispose()
    return [(_aware(a), _aware(b), _aware(c)) for a, b, c in rows]


def pick_up_ms(stack: Stack) -> list[float]:
    """Enqueued → claimed, from the rows' own timestamps, in ms."""
    return [(claimed - enqueued).total_seconds() * 1000 for enqueued, claimed, _ in job_times(stack)]


def throughput(stack: Stack, exercise_id: str, code: str, jobs: int) -> float:
    """Verdicts per minute for ``jobs`` submissions sent at once, from warm pools: first
    enqueued → last finished."""
    for worker in stack.workers:
        settle.wait_quiet(worker.pid, stack.warm)
    done = len(job_times(stack))
    clients = [new_client(stack) for _ in range(jobs)]
    try:
        ids = [submit(client, exercise_id, code) for client in clients]
        for client, submission in zip(clients, ids, strict=True):
            verdict(client, submission)
    finally:
        for client in clients:
            client.close()
    batch = job_times(stack)[done:]
    span = max(f for _, _, f in batch) - min(e for e, _, _ in batch)
    return len(batch) / span.total_seconds() * 60


# ---------------------------------------------------------------- page load


async def _connection(
    host: str, port: int, request: bytes, stop: float, limit: int, counts: list[int]
) -> None:
    """One keep-alive connection asking ``request`` again and again until ``stop``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.monotonic() < stop and counts[0] < limit:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            counts[0 if status == 200 else 1] += 1
    finally:
        writer.close()


async def _load(
    host: str, port: int, request: bytes, seconds: float, limit: int, connections: int
) -> tuple[int, int, float]:
    counts = [0, 0]
    started = time.monotonic()
    await asyncio.gather(
        *(_connection(host, port, request, started + seconds, limit, counts) for _ in range(connections))
    )
    return counts[0], counts[1], time.monotonic() - started


def requests_per_second(
    stack: Stack, path: str, seconds: float, limit: int = 100_000, connections: int = 8
) -> float:
    """GET ``path`` over ``connections`` keep-alive connections for ``seconds`` (or ``limit``
    requests), as one returning visitor; 200s per second."""
    with new_client(stack) as client:
        client.get(path).raise_for_status()  # the visitor's cookie, and a warm cache
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{stack.port}\r\nCookie: {cookie}\r\n"
        "Accept: text/html\r\n\r\n"
    ).encode()
    ok, failed, took = asyncio.run(_load("127.0.0.1", stack.port, request, seconds, limit, connections))
    if failed:
        raise RuntimeError(f"{path}: {failed} of {ok + failed} responses were not 200")
    return ok / took
