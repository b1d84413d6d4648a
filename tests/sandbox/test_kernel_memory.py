"""Memory held before a memory run and freed in it (issue 41, ballast), and facts the child's
report alone said (gradients released, a base frozen), under each sandbox and start (conftest's
PAIRS): a pass on memory rests on the kernel's count of the process from the run's start and from
the load of the learner's file (worker/checks/kernel_memory.py, ``since_watch``). The programs are
the golden bank's (tests/worker/golden/<exercise>/fail--*.py), each a pass before: a wrong loop
on the memory run, under the high-water mark a ballast raised (a tensor made at import, bytes
kept in a global across the graded run), or a report that says what the loop did not do."""

from pathlib import Path

import pytest

from tests.sandbox.course import find_exercise

pytestmark = pytest.mark.slow  # real sandboxes, real torch

GOLDEN = Path(__file__).parents[1] / "worker" / "golden"

ATTACKS = {
    "gradient-accumulation/accumulate": [
        "backward-once-per-cycle--ballast-at-import",
        "backward-once-per-cycle--ballast-deleted-through-a-global-meter-freed",
    ],
    "gradient-accumulation/remainder": ["backward-once-per-cycle--ballast-at-import-meter-freed"],
    "gpu-memory/fit-the-budget": [
        "fail--ballast-at-import-naive-memory-run",
        "fail--grads-stashed-ballast-freed",
    ],
    "gpu-memory/measure-it": ["fail--ballast-kept-across-runs-checkpoint-ignored"],
    "model-memory/step-in-backward": ["fail--ballast-kept-from-the-maths-run"],
    "model-memory/train-an-adapter": ["fail--never-frozen-ballast-freed", "fail--frozen-then-unfrozen"],
}
CASES = [(ex, name) for ex, names in ATTACKS.items() for name in names]


@pytest.fixture
def exercise(request):
    """``run`` grades the exercise the test names (its ``case``)."""
    return find_exercise(request.getfixturevalue("case")[0])


@pytest.mark.parametrize("case", CASES, ids=[n for _, n in CASES])
def test_memory_freed_in_the_run_or_a_fact_only_reported_does_not_pass(run, mode, case):
    exercise_id, name = case
    outcome = run((GOLDEN / exercise_id.split("/")[1] / f"{name}.py").read_bytes())
    assert outcome.status in ("failed", "error"), outcome.verdict
    kernel = [
        c for c in outcome.verdict["checks"] if "system" in c["name"] or c["name"].startswith("No gradient")
    ]
    assert [c for c in kernel if c["status"] == "failed"], outcome.verdict  # the kernel's line fails it


@pytest.mark.parametrize("case", [("model-memory/train-an-adapter", "solution")], ids=["train-an-adapter"])
def test_the_adapters_solution_passes_on_the_memory_the_system_counted(run, mode, case, exercise):
    outcome = run((Path(exercise.path) / "solution.py").read_bytes())
    assert outcome.status == "passed", outcome.verdict
    no_grad = outcome.verdict["checks"][1]
    assert "as the operating system counted the process" in no_grad["message"], no_grad
