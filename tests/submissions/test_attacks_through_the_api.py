"""Issue 41 through the web: one program of each class the red team found, submitted as a learner
submits (the JSON API), graded by a real worker (the sandbox and start the settings choose), gets
a non-passing verdict and no pass in the learner's progress; the next learner's correct loop is
then graded and passes.

The classes: a short report (find-the-bottleneck's runs emptied), lists the child reports
rewritten (step-in-backward's records), a meter silenced (fit-the-budget's naive step), an adapter
that never trains. tests/sandbox holds each route in several styles under both starts; here each
class goes the whole way, POST to progress.
"""

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from tests.conftest import LESSONS, arm_csrf
from tests.sandbox.course import find_exercise, solution_text
from tests.sandbox.test_rewritten_reports import FIT_THE_BUDGET, STEP_IN_BACKWARD
from tests.sandbox.test_short_reports import ADAPTER, ADAPTER_ROUTES, PHASES_ROUTES
from worker.grading import Grader
from worker.runner import Worker

pytestmark = pytest.mark.slow  # a real sandbox, real torch

ATTACKS = {
    "short-report": ("bottleneck/find-the-bottleneck", PHASES_ROUTES["runs-emptied-on-the-link"]),
    "lists-rewritten": ("model-memory/step-in-backward", STEP_IN_BACKWARD[next(iter(STEP_IN_BACKWARD))]),
    "meter-silenced": ("gpu-memory/fit-the-budget", FIT_THE_BUDGET["meter-silenced-through-gc"]),
    "adapter-never-trains": (
        "model-memory/train-an-adapter",
        ADAPTER + ADAPTER_ROUTES["zero-adapter-zeros"][1],
    ),
}

GRADER_FAULTS = {"grader-trouble", "grader-crashed", "worker-trouble", "exercise-gone"}


@pytest.fixture(scope="module")
def grader():
    """One grader for the module, as a worker keeps one: the sandbox and start its settings say."""
    with Grader.running(Settings(lessons_dir=LESSONS, _env_file=None), pool_size=0) as grading:
        yield grading


def _api(exercise_id: str) -> str:
    lesson, name = exercise_id.split("/")
    return f"/api/lessons/{lesson}/exercises/{name}/submissions"


def _submit_and_grade(client: TestClient, app, grader: Grader, exercise_id: str, code: str) -> dict:
    created = client.post(_api(exercise_id), json={"code": code})
    assert created.status_code == 202, created.text
    with Worker(app.state.settings, grader.grade, course=app.state.course) as worker:
        while worker.run_once():
            pass
    polled = client.get(f"/api/submissions/{created.json()['id']}").json()
    assert polled["verdict"] is not None, polled
    return polled


def _passed(client: TestClient, exercise_id: str) -> bool:
    lesson = exercise_id.split("/")[0]
    progress = client.get("/api/progress").json()
    (mine,) = [p for p in progress["lessons"] if p["lesson"] == lesson]
    return exercise_id in mine["exercises_passed"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_an_attack_submitted_through_the_api_is_no_pass_and_the_next_correct_loop_passes(
    client, app, grader, attack
):
    exercise_id, code = ATTACKS[attack]
    polled = _submit_and_grade(client, app, grader, exercise_id, code)
    assert polled["status"] in ("failed", "error"), polled["verdict"]
    diagnosis = (polled["verdict"].get("diagnosis") or {}).get("id")
    assert diagnosis not in GRADER_FAULTS, f"judged on the learner's loop, not a fault of ours: {polled}"
    assert not _passed(client, exercise_id), "a wrong loop was recorded as a pass"

    with TestClient(app) as next_learner:
        arm_csrf(next_learner)
        solution = solution_text(find_exercise(exercise_id))
        polled = _submit_and_grade(next_learner, app, grader, exercise_id, solution)
        assert polled["status"] == "passed", polled["verdict"]
        assert _passed(next_learner, exercise_id)
    assert not _passed(client, exercise_id), "the attacker's progress is still no pass"
