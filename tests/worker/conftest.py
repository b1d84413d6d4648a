import collections
import dataclasses
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path

import pytest

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch  # noqa: F401

from app.config import get_settings  # noqa: E402
from app.lessons.course import load_course  # noqa: E402
from contracts.verdict import render  # noqa: E402
from tests.worker.cases import CASES  # noqa: E402
from worker import forkserver, sandbox  # noqa: E402
from worker.grading import Grader  # noqa: E402

# exercise slugs are unique across the course: golden/<slug>/ and exercise(slug) use them
EXERCISES = (
    "accumulate",
    "remainder",
    "scaler-clipping",
    "token-loss",  # lesson 2
    "amp-loop",
    "find-the-bottleneck",
    "input-pipeline",
    "read-the-gpu-trace",
    "fit-the-budget",
    "measure-it",
    "step-in-backward",
    "train-an-adapter",  # lesson 5
    "chunked-loss",
    "pack-the-batch",  # lesson 6
)
GOLDEN = Path(__file__).parent / "golden"
GOLDEN_FILES = sorted(GOLDEN.glob("*/*.py"))  # a file added there is a test at the next run
# the starters graded too (tests/worker/test_model_memory.py: the plain loop they begin from)
STARTERS = ("step-in-backward", "train-an-adapter")


@pytest.fixture(scope="session")
def course():
    return load_course(get_settings().lessons_dir)


@pytest.fixture(scope="session")
def exercise(course):
    """``exercise(slug, **limits)``: the course's exercise ``slug``, limits optionally changed."""

    def get(slug, **limits):
        found = next((e for e in course.exercises if e.slug == slug), None)
        assert found is not None, slug
        if limits:
            found = dataclasses.replace(found, limits=dataclasses.replace(found.limits, **limits))
        return found

    return get


class OnFirstJob:
    """A grader's runner, started when its first job comes (a submission refused before it runs
    starts no template): a fork server where jobs can be forked here, else a pool of one."""

    def __init__(self, setup: sandbox.Setup) -> None:
        self._setup = setup
        self._runner = None

    def run(self, *args, **kwargs):
        if self._runner is None:
            # secrets in the launcher's environment as its template starts: none may reach a
            # job (tests/worker/test_grading.py's probe prints the job's environment)
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("TREINO_SECRET_KEY", "must-not-reach-the-sandbox")
                self._runner = forkserver.runner("fork", self._setup, 1)
        return self._runner.run(*args, **kwargs)

    def warm(self) -> int:
        return 0 if self._runner is None else self._runner.warm()

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()


class Graders:
    """Up to one grader per core, each forking its jobs from a template of its own (the worker's
    start path, worker/forkserver.py: a job costs a fork, not a cold interpreter importing torch),
    started when a grade first needs it. Each grader runs one job at a time, as a worker does.
    The cold start (``Grader.running(..., pool_size=0)``, `treino check`'s) is tested in
    tests/sandbox/test_launcher.py; single-use sandboxes under attack in tests/sandbox."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._idle: list[Grader] = []
        self._all: list[Grader] = []
        self._changed = threading.Condition()

    def _start(self) -> Grader:
        settings = get_settings()
        setup = sandbox.setup(settings.sandbox, settings.device)
        return Grader(setup, OnFirstJob(setup))

    def grade(self, exercise, code: bytes, lang: str = "en") -> dict:
        with self._changed:
            while not self._idle and len(self._all) >= self.most:
                self._changed.wait()
            grader = self._idle.pop() if self._idle else None
            if grader is None:
                self._all.append(None)  # its place, while it starts
        if grader is None:
            try:
                grader = self._start()
            except BaseException:
                with self._changed:
                    self._all.remove(None)
                    self._changed.notify_all()
                raise
            with self._changed:
                self._all[self._all.index(None)] = grader
        try:
            return render(grader.grade(exercise, code), lang)
        finally:
            with self._changed:
                self._idle.append(grader)
                self._changed.notify_all()

    def close(self) -> None:
        for grader in self._all:
            if grader is not None:
                grader.close()


@pytest.fixture(scope="session")
def grader():
    """This machine's graders (``Graders``), closed at the end of the session."""
    graders = Graders(os.cpu_count() or 1)
    yield graders
    graders.close()


@pytest.fixture(scope="session")
def grade(grader):
    """``grade(exercise, code, lang="en")``: the verdict as a reader in ``lang`` gets it."""
    return grader.grade


def bank(exercise, slug) -> list[Path]:
    folder = Path(exercise(slug).path)
    return [folder / "solution.py", *sorted((folder / "mistakes").glob("*.py"))]


class Graded(Mapping):
    """Verdicts by key, each graded once, when a test first needs it. What the selected tests
    are known to need (``ahead``) is graded in the background, as many at a time as there are
    cores; a key asked for before its turn is graded at once, ahead of that queue."""

    def __init__(self, jobs: dict, grade, workers: int) -> None:
        self._jobs = jobs  # key -> (exercise, code, lang)
        self._grade = grade
        self._workers = workers
        self._verdicts: dict[tuple, Future] = {}
        self._queue: collections.deque = collections.deque()
        self._threads: list[threading.Thread] = []
        self._changed = threading.Condition()
        self._running = self._asking = 0

    def ahead(self, keys: Iterable[tuple]) -> None:
        """Grade these in the background (in this order), each at most once."""
        with self._changed:
            self._queue.extend(k for k in keys if k in self._jobs and k not in self._verdicts)
            while len(self._threads) < self._workers and len(self._threads) < len(self._queue):
                thread = threading.Thread(target=self._work, name="graded", daemon=True)
                self._threads.append(thread)
                thread.start()

    def _slot(self, asked: bool) -> None:
        """Wait for a core; a test waiting for a verdict goes before the background."""
        with self._changed:
            self._asking += asked
            while self._running >= self._workers or (not asked and self._asking):
                self._changed.wait()
            self._asking -= asked
            self._running += 1

    def _run(self, key: tuple, future: Future) -> None:
        try:
            future.set_result(self._grade(*self._jobs[key]))
        except BaseException as exc:
            future.set_exception(exc)
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def _work(self) -> None:
        while True:
            self._slot(asked=False)
            with self._changed:
                while self._queue and self._queue[0] in self._verdicts:
                    self._queue.popleft()
                if not self._queue:
                    self._running -= 1
                    self._threads.remove(threading.current_thread())
                    self._changed.notify_all()
                    return
                key = self._queue.popleft()
                future = self._verdicts[key] = Future()
            self._run(key, future)

    def __getitem__(self, key: tuple) -> dict:
        if key not in self._jobs:
            raise KeyError(key)
        with self._changed:
            future = self._verdicts.get(key)
            mine = future is None
            if mine:
                future = self._verdicts[key] = Future()
        if mine:
            self._slot(asked=True)
            self._run(key, future)
        return future.result()

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def values(self):
        self.ahead(self._jobs)
        return super().values()

    def items(self):
        self.ahead(self._jobs)
        return super().items()


def needs(item, exercise) -> list[tuple]:
    """The keys of ``graded`` that a collected test is known to read: its golden file, or its
    exercise's bank; others are graded when first read."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "graded" not in getattr(item, "fixturenames", ()):
        return []
    if "path" in params and item.originalname == "test_golden_submission":
        path = params["path"]
        return [("golden", path.parent.name, path.stem)]
    if "slug" in params and item.originalname == "test_exercise_bank":
        return [("bank", params["slug"], p.stem) for p in bank(exercise, params["slug"])]
    return []


@pytest.fixture(scope="session")
def graded(exercise, grade):
    """Every submission the slow tests look at, graded once, when first needed (only what the
    selected tests read is graded: ``-k`` one golden file grades that file).

    Keys: ``("golden", slug, stem)``, ``("bank", slug, stem)`` for the exercises' own
    solution and mistakes, ``("starter", slug)`` for ``STARTERS``, ``("case", name)`` for
    ``cases.CASES``. Each is graded through a fork server (``Graders``); one per core keeps
    every core busy.
    """
    jobs = {
        ("golden", p.parent.name, p.stem): (exercise(p.parent.name), p.read_bytes(), "en")
        for p in GOLDEN_FILES
    }
    for slug in EXERCISES:
        for p in bank(exercise, slug):
            jobs[("bank", slug, p.stem)] = (exercise(slug), p.read_bytes(), "en")
    for slug in STARTERS:
        starter = Path(exercise(slug).path) / "starter.py"
        jobs[("starter", slug)] = (exercise(slug), starter.read_bytes(), "en")
    for name, case in CASES.items():
        jobs[("case", name)] = (exercise(case.slug, **case.limits), case.code, case.lang)
    return Graded(jobs, grade, os.cpu_count() or 1)


@pytest.fixture(scope="module", autouse=True)
def _graded_ahead(request, exercise):
    """As a module starts, what its selected tests will read is graded in the background. Per
    module, not per session: under pytest-xdist (``make test``: ``--dist loadfile``) a worker runs
    whole modules, and only the ones it was given."""
    keys = [
        key
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        for key in needs(item, exercise)
    ]
    if keys:
        request.getfixturevalue("graded").ahead(keys)
