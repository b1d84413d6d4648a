import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch  # noqa: F401

from app.config import get_settings  # noqa: E402
from contracts.course import load_course  # noqa: E402
from contracts.verdict import render  # noqa: E402
from tests.worker.cases import CASES  # noqa: E402
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
    "fit-the-budget",
    "measure-it",
    "step-in-backward",
    "train-an-adapter",  # lesson 5
)
GOLDEN = Path(__file__).parent / "golden"
GOLDEN_FILES = sorted(GOLDEN.glob("*/*.py"))


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


@pytest.fixture(scope="session")
def grader():
    """This machine's grader, with no warm pool: a cold sandbox per job, as `treino check`."""
    with Grader.running(get_settings(), pool_size=0) as running:
        yield running


@pytest.fixture(scope="session")
def grade(grader):
    """``grade(exercise, code, lang="en")``: the verdict as a reader in ``lang`` gets it."""
    return lambda exercise, code, lang="en": render(grader.grade(exercise, code), lang)


def bank(exercise, slug) -> list[Path]:
    folder = Path(exercise(slug).path)
    return [folder / "solution.py", *sorted((folder / "mistakes").glob("*.py"))]


@pytest.fixture(scope="session")
def graded(exercise, grade):
    """Every submission the slow tests look at, graded once, each in its own sandbox.

    Keys: ``("golden", slug, stem)``, ``("bank", slug, stem)`` for the exercises' own
    solution and mistakes, ``("case", name)`` for ``cases.CASES``. One pool keeps every
    core busy: a grade is mostly the child importing torch.
    """
    jobs = {
        ("golden", p.parent.name, p.stem): (exercise(p.parent.name), p.read_bytes(), "en")
        for p in GOLDEN_FILES
    }
    for slug in EXERCISES:
        for p in bank(exercise, slug):
            jobs[("bank", slug, p.stem)] = (exercise(slug), p.read_bytes(), "en")
    for name, case in CASES.items():
        jobs[("case", name)] = (exercise(case.slug, **case.limits), case.code, case.lang)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TREINO_SECRET_KEY", "must-not-reach-the-sandbox")
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            futures = {key: pool.submit(grade, *job) for key, job in jobs.items()}
            return {key: future.result() for key, future in futures.items()}
