"""A class at once (issue 26): learners, each an account with its own address, press Submit at
the same moment, then poll as the page does, while a visitor reads a lesson and a learner their
progress. Through `treino serve` and a real worker grading the accumulate solution.

    .venv/bin/python -m bench.load --learners 100,300 --backends sqlite,postgresql

Each learner is an account with a bearer token (made in the database beforehand: the burst is
what is measured, not argon2) and its own client address, sent as X-Forwarded-For through the
trusted local proxy (the bench connects from 127.0.0.1, which TREINO_FORWARDED_ALLOW_IPS trusts).
A 503 with Retry-After is answered by sending again after it, as a learner would; any other 5xx,
a 503 without Retry-After, or a request with no answer within REQUEST_TIMEOUT is counted.
"""

import argparse
import asyncio
import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from sqlalchemy.orm import Session

from bench import settle
from bench.stack import SECRET, Stack
from bench.traffic import FINAL, address

EXERCISE = "gradient-accumulation/accumulate"
POLL_SECONDS = 1.0  # an API client's poll ("api"); the page waits on /live/ instead ("page")
PROBE_SECONDS = 0.25  # how often the quick pages are asked during the burst
REQUEST_TIMEOUT = 30.0  # a request with no answer by then is a timeout
DEADLINE_SECONDS = 900.0  # the whole class graded by then, or the run is reported unfinished
VISITOR = "10.255.255.1"  # the anonymous reader of the lesson page


@dataclass
class Burst:
    """What one class at once came to."""

    backend: str
    learners: int
    poll: str = "page"  # "page": wait on /live/ as the page does, then read; "api": poll each second
    post_ms: list[float] = field(default_factory=list)  # every POST answered, ms (retries too)
    accepted_ms: list[float] = field(default_factory=list)  # first press → 202, per learner
    refused: int = 0  # 503 with Retry-After (sent again after it)
    refused_ms: list[float] = field(default_factory=list)  # how fast those 503s came
    failures: list[str] = field(default_factory=list)  # other 5xx, a 503 without Retry-After…
    timeouts: int = 0
    queued: int = 0  # 202s
    graded: int = 0  # final verdicts seen by the learners' polls
    passed: int = 0
    all_graded_s: float | None = None  # first press → the last verdict seen
    quick_ms: dict[str, list[float]] = field(default_factory=dict)  # page → ms during the burst

    @property
    def five_xx(self) -> int:
        """5xx answers other than a 503 with Retry-After."""
        return len(self.failures)


def quantile(ms: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (1.0: the largest); NaN of nothing."""
    if not ms:
        return float("nan")
    ranked = sorted(ms)
    return ranked[min(len(ranked) - 1, max(0, math.ceil(q * len(ranked)) - 1))]


def learner_tokens(stack: Stack, count: int) -> list[str]:
    """``count`` accounts in the stack's database, each with an API token (one argon2 hash for
    all: they are made here, not through the sign-up route)."""
    from app.accounts.models import User
    from app.accounts.passwords import hash_password
    from app.accounts.sessions import start_session

    engine = stack.database()
    password_hash = hash_password("a long class password")
    tokens = []
    try:
        with Session(engine) as session, session.begin():
            for n in range(count):
                user = User(email=f"learner{n}@class.example", password_hash=password_hash, lang="en")
                session.add(user)
                session.flush()
                tokens.append(start_session(session, user, kind="api", visitor_id=f"bench-{n}"))
    finally:
        engine.dispose()
    return tokens


def _retry_after(response: httpx2.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    return float(value) if value.isdigit() else None


@functools.cache
def _settings():
    from app.config import Settings

    return Settings(secret_key=SECRET, _env_file=None)


def _wait_path(submission: int, seen: str) -> str:
    """What the page's status.js waits on (app/submissions/routes.py, submission_changes), signed
    with the stack's key (its settings built once, not at every wait)."""
    from app.submissions import watch

    return f"/live/submissions/{submission}?seen={seen}&key={watch.key(_settings(), submission)}"


async def _class(stack: Stack, tokens: list[str], code: str, burst: Burst) -> None:
    lesson, exercise = EXERCISE.split("/")
    submit = f"/api/lessons/{lesson}/exercises/{exercise}/submissions"
    # shorter than the server's keep-alive (uvicorn: 5 s): a connection it closes is never reused
    limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=2)
    start = asyncio.Event()
    done = asyncio.Event()
    pending = len(tokens)
    async with httpx2.AsyncClient(
        base_url=stack.base, timeout=REQUEST_TIMEOUT, limits=limits, trust_env=False
    ) as client:

        async def ask(method: str, path: str, headers: dict, **kwargs) -> httpx2.Response | None:
            """One request; None when it got no answer in time (counted)."""
            sent = time.perf_counter()
            try:
                response = await client.request(method, path, headers=headers, **kwargs)
            except httpx2.TimeoutException:
                burst.timeouts += 1
                return None
            except httpx2.TransportError as e:  # the connection was refused or dropped
                burst.failures.append(f"{method} {path}: {type(e).__name__} {e}")
                return None
            took = (time.perf_counter() - sent) * 1000
            if method == "POST":
                burst.post_ms.append(took)
            if response.status_code == 503 and _retry_after(response) is not None:
                burst.refused += 1
                burst.refused_ms.append(took)
            elif response.status_code >= 500:
                burst.failures.append(f"{method} {path}: {response.status_code} {response.text[:120]}")
            return response

        async def learner(n: int, token: str) -> None:
            nonlocal pending
            headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": address(n)}
            await start.wait()
            pressed = time.perf_counter()
            try:
                while True:  # press Submit until the code is queued
                    response = await ask("POST", submit, headers, json={"code": code})
                    if response is not None and response.status_code == 202:
                        break
                    if response is None or (wait := _retry_after(response)) is None:
                        if response is not None and response.status_code < 500:
                            burst.failures.append(f"POST: {response.status_code} {response.text[:120]}")
                        return  # no answer, or not one a learner can act on: counted above
                    await asyncio.sleep(wait)
                burst.accepted_ms.append((time.perf_counter() - pressed) * 1000)
                burst.queued += 1
                submission, seen = response.json()["id"], "queued"
                while True:  # as the page waits (burst.poll "page"), or an API client polls
                    if burst.poll == "page":
                        await ask("GET", _wait_path(submission, seen), headers)
                    else:
                        await asyncio.sleep(POLL_SECONDS)
                    polled = await ask("GET", f"/api/submissions/{submission}", headers)
                    if polled is None or polled.status_code != 200:
                        if polled is not None and polled.status_code < 500:
                            burst.failures.append(f"poll: {polled.status_code} {polled.text[:120]}")
                            return
                        continue
                    body = polled.json()
                    seen = body["status"]
                    if body["status"] in FINAL:
                        burst.graded += 1
                        burst.passed += body["status"] == "passed"
                        burst.all_graded_s = time.perf_counter() - pressed
                        return
            finally:
                pending -= 1
                if not pending:
                    done.set()

        async def probe(name: str, path: str, headers: dict) -> None:
            times = burst.quick_ms.setdefault(name, [])
            await start.wait()
            while not done.is_set():
                sent = time.perf_counter()
                response = await ask("GET", path, headers)
                if response is not None:
                    times.append((time.perf_counter() - sent) * 1000)
                await asyncio.sleep(PROBE_SECONDS)

        tasks = [asyncio.create_task(learner(n, token)) for n, token in enumerate(tokens)]
        probes = [
            asyncio.create_task(
                probe("lesson page", f"/lessons/{lesson}", {"X-Forwarded-For": "10.255.0.1"})
            ),
            asyncio.create_task(
                probe(
                    "progress JSON",
                    "/api/progress",
                    {"Authorization": f"Bearer {tokens[0]}", "X-Forwarded-For": address(0)},
                )
            ),
        ]
        await asyncio.sleep(0.2)  # every learner is waiting at the button
        start.set()
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_SECONDS)
        except TimeoutError:
            burst.failures.append(f"not every verdict within {DEADLINE_SECONDS:.0f} s")
        done.set()
        await asyncio.gather(*probes)


def _warm_up(stack: Stack, token: str, code: str) -> None:
    """One learner before the class: a submission graded and the pages read once, as a server
    that has served anyone has done (a process's first requests compile each statement)."""
    lesson, exercise = EXERCISE.split("/")
    headers = {"Authorization": f"Bearer {token}", "X-Forwarded-For": VISITOR}
    with httpx2.Client(base_url=stack.base, timeout=REQUEST_TIMEOUT, trust_env=False) as client:
        client.get(f"/lessons/{lesson}", headers={"X-Forwarded-For": VISITOR})
        client.get("/api/progress", headers=headers)
        sent = client.post(
            f"/api/lessons/{lesson}/exercises/{exercise}/submissions", headers=headers, json={"code": code}
        )
        sent.raise_for_status()
        deadline = time.monotonic() + DEADLINE_SECONDS
        while (
            client.get(f"/api/submissions/{sent.json()['id']}", headers=headers).json()["status"] not in FINAL
        ):
            assert time.monotonic() < deadline, "the warm-up submission was never graded"
            time.sleep(0.2)


def burst(stack: Stack, learners: int, code: str, poll: str = "page") -> Burst:
    """``learners`` accounts submit at once through ``stack`` (its workers quiet first), then
    wait for their verdicts as ``poll`` says."""
    result = Burst(stack.backend, learners, poll)
    *tokens, before = learner_tokens(stack, learners + 1)
    _warm_up(stack, before, code)
    for worker in stack.workers:
        settle.wait_quiet(worker.pid, stack.warm)
    asyncio.run(_class(stack, tokens, code, result))
    for worker in stack.workers:
        worker.check()
    return result


def row(b: Burst) -> str:
    """One line of the table."""
    graded = (
        f"all graded in {b.all_graded_s:.1f} s"
        if b.graded == b.learners and b.all_graded_s
        else (f"**{b.graded} of {b.learners} graded**")
    )
    quick = max((max(ms) for ms in b.quick_ms.values() if ms), default=float("nan"))
    refused = f"{b.refused} (p50 {quantile(b.refused_ms, 0.5):,.0f} ms)" if b.refused else "0"
    return (
        f"| {b.learners} | {NAMES[b.backend]} | {WAITS[b.poll]} | {quantile(b.post_ms, 0.5) / 1000:.2f} / "
        f"{quantile(b.post_ms, 0.99) / 1000:.2f} / {max(b.post_ms, default=0) / 1000:.2f} s | "
        f"{quantile(b.accepted_ms, 1.0) / 1000:.2f} s | {refused} | {b.five_xx} | {b.timeouts} | "
        f"{graded} | {quick / 1000:.2f} s |"
    )


NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
WAITS = {"page": "as the page", "api": f"API poll each {POLL_SECONDS:.0f} s"}
ABOUT = (
    "Learners, each an account with its own address (X-Forwarded-For through the trusted "
    "local proxy), press Submit on the accumulate solution at the same moment through `treino "
    "serve` (`TREINO_WEB_CONCURRENCY` at its default) and one `treino worker` (fork path); each "
    "then waits for the verdict as the page does (`/live/submissions/<id>`, answered when the "
    "status changes, then `GET /api/submissions/<id>`), or, in the rows that say so, as an API "
    "client polling `GET /api/submissions/<id>` every second. A 503 with Retry-After is sent again "
    "after it. POST latencies count every answer, retries too; last 202: from the press to the "
    f"last learner's 202; timeouts: no answer in {REQUEST_TIMEOUT:.0f} s. Quick pages: a lesson "
    f"page (anonymous) and `/api/progress` (a learner), each asked every {PROBE_SECONDS} s "
    "until every verdict is in."
)
HEADER = [
    "| learners at once | database | waiting for the verdict | POST p50 / p99 / max | last 202 "
    "after | 503 + Retry-After (sent again) | other 5xx | timeouts | verdicts | quick pages, slowest |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def table(bursts: list[Burst]) -> list[str]:
    return [*HEADER, *(row(b) for b in bursts)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.splitlines()[0])
    parser.add_argument("--learners", default="100", help="class sizes, comma-separated")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pool-size", type=int, default=1, help="the worker's TREINO_POOL_SIZE")
    parser.add_argument(
        "--poll", default="page", help="page (wait on /live/ as the page does), api (poll each 1 s), both"
    )
    args = parser.parse_args(argv)
    from app.config import get_settings
    from contracts.exercise import load_exercises

    exercise = load_exercises(get_settings().lessons_dir).exercise(EXERCISE)
    assert exercise is not None, f"the course has lost {EXERCISE}"
    code = (Path(exercise.path) / "solution.py").read_text()
    bursts = []
    polls = ["page", "api"] if args.poll == "both" else [args.poll]
    for backend in args.backends.split(","):
        for learners, poll in ((int(n), p) for n in args.learners.split(",") for p in polls):
            with Stack(backend, args.pool_size, start="fork") as stack:  # a fresh database each
                stack.add_worker()
                print(f"{backend}: {learners} learners at once, {WAITS[poll]}", file=sys.stderr, flush=True)
                bursts.append(burst(stack, learners, code, poll))
                print(row(bursts[-1]), file=sys.stderr, flush=True)
                for failure in bursts[-1].failures[:5]:
                    print(f"  {failure}", file=sys.stderr)
    print("\n".join(table(bursts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
