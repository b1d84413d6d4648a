"""The fork path's figures (issue 14): a learner resubmitting at once, a class submitting
together, the same verdicts as single-use sandboxes give, and where a forked job's time goes.

    .venv/bin/python -m bench --only forks      # these alone, while developing
"""

import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.config import ROOT
from bench import settle, traffic
from bench.report import Samples
from bench.stack import Stack
from worker.sandbox import Result

LEARNERS = 20  # a class submitting at once
RESUBMITS = 11  # one learner's back-to-back submissions


@dataclass
class ForkFigures:
    """What the report shows for the fork path."""

    cli_cold: list[float] = field(default_factory=list)  # `treino check`, a new process each, ms
    resubmit: dict[str, list[float]] = field(default_factory=dict)  # backend → submit→verdict ms
    classroom: dict[str, float] = field(default_factory=dict)  # backend → all graded, ms
    learners: int = LEARNERS
    pick_up: dict[str, list[float]] = field(default_factory=dict)  # backend → enqueued→claimed ms
    parts: Samples = field(default_factory=Samples)  # graded through the fork server in-process
    same: tuple[int, list[str]] | None = None  # files compared, and those whose verdicts differ


def cli_cold(exercise, runs: int) -> list[float]:
    """``treino check`` on the solution from a new process each time: what "cold" means to the
    issue (the command's own start, torch in it, and a sandbox that imports torch)."""
    solution = Path(exercise.path) / "solution.py"
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "worker.cli", "check", exercise.id, str(solution)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        times.append((time.perf_counter() - started) * 1000)
    return times


def resubmit(stack: Stack, exercise_id: str, code: str, runs: int = RESUBMITS) -> list[float]:
    """One learner sending again the moment each verdict is in (no pause to read): submit →
    final verdict, ms; the first once the workers are quiet."""
    for worker in stack.workers:
        settle.wait_quiet(worker.pid, stack.warm)
    times = []
    with traffic.new_client(stack) as client:
        for _ in range(runs):
            started = time.perf_counter()
            body = traffic.verdict(client, traffic.submit(client, exercise_id, code))
            times.append((time.perf_counter() - started) * 1000)
            if body["status"] != "passed":
                raise RuntimeError(f"the solution was {body['status']}: {body['verdict']}")
    return times


def classroom(stack: Stack, exercise_id: str, code: str, learners: int = LEARNERS) -> float:
    """``learners`` learners (a cookie jar each) submitting at once, from quiet workers: ms from
    the first submission sent until every verdict is in, as their pages poll for them."""
    for worker in stack.workers:
        settle.wait_quiet(worker.pid, stack.warm)
    clients = [traffic.new_client(stack) for _ in range(learners)]
    done: list[float] = []
    try:
        started = time.perf_counter()
        ids = [traffic.submit(client, exercise_id, code) for client in clients]

        def poll(client, submission: int) -> None:
            body = traffic.verdict(client, submission)
            if body["status"] == "passed":
                done.append(time.perf_counter())

        pollers = [threading.Thread(target=poll, args=pair) for pair in zip(clients, ids, strict=True)]
        for thread in pollers:
            thread.start()
        for thread in pollers:
            thread.join()
    finally:
        for client in clients:
            client.close()
    if len(done) != learners:
        raise RuntimeError(f"{learners - len(done)} of {learners} solutions did not pass")
    return (max(done) - started) * 1000


class Recording:
    """A pool (or fork server) that keeps each job's sandbox result: for the breakdown."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.results: list[Result] = []
        self.size = inner.size

    def run(self, *args, **kwargs):
        result = self.inner.run(*args, **kwargs)
        self.results.append(result)
        return result

    def warm(self) -> int:
        return self.inner.warm()

    def close(self) -> None:
        self.inner.close()


def forked(setup, exercise, code: bytes, runs: int) -> Samples:
    """``Grader.grade`` through a fork server, each run from a quiet machine; the samples'
    metrics gain the sandbox's own ``start_ms`` (fork, namespaces, cgroup)."""
    import os

    from worker.forkserver import ForkServer
    from worker.grading import Grader

    samples = Samples()
    recording = Recording(ForkServer(setup.isolation, setup.device, setup.gpu))
    with Grader(setup, recording) as grader:
        grader.prepare([exercise])
        for _ in range(runs):
            settle.wait_quiet(os.getpid(), 1, include_root=False)
            started = time.perf_counter()
            verdict = grader.grade(exercise, code)
            samples.ms.append((time.perf_counter() - started) * 1000)
            if verdict["status"] != "passed":
                raise RuntimeError(f"{exercise.id}: the solution was {verdict['status']}")
            samples.metrics.append({**verdict["metrics"], "start_ms": recording.results[-1].start_ms})
    return samples


def decision(verdict: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a verdict decides, without what it measured: status, the named mistake, and each
    check's name, outcome and message (its figures, timings among them, left out)."""
    diagnosis = verdict.get("diagnosis") or {}
    return (
        verdict["status"],
        diagnosis.get("id"),
        tuple((c["name"], c["passed"], c["message"]) for c in verdict["checks"]),
    )


def same_verdicts(setup, course) -> tuple[int, list[str]]:
    """Every exercise's solution and mistake files graded in single-use sandboxes (a warm pool)
    and in forks of a template: how many files, and those whose decisions differ."""
    import functools

    from worker import sandbox
    from worker.forkserver import ForkServer
    from worker.grading import Grader
    from worker.pool import Pool

    files = [
        (exercise, path)
        for exercise in course.exercises
        for path in [
            Path(exercise.path) / "solution.py",
            *sorted((Path(exercise.path) / "mistakes").glob("*.py")),
        ]
    ]
    single = Pool(2, functools.partial(sandbox.Sandbox, setup.isolation, setup.device, setup.gpu))
    differ = []
    with (
        Grader(setup, single) as exec_grader,
        Grader(setup, ForkServer(setup.isolation, setup.device, setup.gpu)) as fork_grader,
    ):
        exec_grader.prepare(list(course.exercises))
        for exercise, path in files:
            code = path.read_bytes()
            one, other = exec_grader.grade(exercise, code), fork_grader.grade(exercise, code)
            if decision(one) != decision(other):
                differ.append(f"{exercise.id}/{path.name}: {decision(one)} ≠ {decision(other)}")
    return len(files), differ


def median(values: list[float]) -> float:
    return statistics.median(values)
