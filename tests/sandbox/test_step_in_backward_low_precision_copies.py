"""step-in-backward: every gradient kept alive as a copy of lower precision.

A loop that moves each gradient out of ``.grad`` in its hook as a bfloat16 (or float16, or
float32) copy and steps every parameter in the last hook from its copy upcast reports one gradient
alive at every step, steps inside backward, and holds the other gradients in a quarter (or half)
of their bytes: a flat bfloat16 buffer read 63.3 MiB, float32 copies under a fused Adam 65.0-65.8,
against the line of 66.1 (2.75 × the 24 MiB of parameters). Only the parameters tell them apart:
Adam's second step from a rounded gradient lands 1.5e-9 (float32, relative) to 1.4e-4 (bfloat16)
away from the plain loop's, the first batch's already 5.6e-11 to 5e-3 away, where right loops
read 0 (a fused Adam 1.1e-15). float32's came within a factor 2 of the 1e-9 of before; the CPU's
line is 1e-13 now: a copy within it keeps ≥ 38 significant bits, ≥ 5.6 bytes of 8, and 11 of
them on top of a fused Adam's 53.7 MiB are over the memory line (a float32 copy and a bfloat16
remainder, 6 bytes, 3.0e-12 and 76.0 MiB).

The styles are the golden files ``tests/worker/golden/step-in-backward/fail--*copies*`` and
``fail--flat-bfloat16-buffer``; every program runs under each start (conftest's PAIRS).
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from app.config import get_settings
from app.lessons.course import load_course
from worker.checks import hookstep as checks
from worker.harness import hookstep as harness

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests/worker/golden/step-in-backward"
EXERCISE = ROOT / "lessons/05-model-memory/exercises/step-in-backward"
COPIES = [
    "fail--bfloat16-copies-stepped-in-the-last-hook",
    "fail--float16-copies-fused-adam",
    "fail--flat-bfloat16-buffer",
    "fail--float32-copies-fused-adam",
    "fail--float32-copies-in-the-second-batch",
]
RIGHT = [EXERCISE / "solution.py", GOLDEN / "pass--fused-adam-in-the-hook.py"]


def _params() -> dict:
    found = load_course(get_settings().lessons_dir).exercise("model-memory/step-in-backward")
    assert found is not None
    return found.check_params


def _trajectory(path: Path) -> list[float]:
    """The file's ``train`` run in this process on the memory run's model: the relative error of
    every parameter, at every place, against the plain loop after each batch (the supervisor reads
    256 places of each weight)."""
    params = _params()
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ref = checks.reference(params)
    model, batches, loss_fn, _ = harness.the_run(params, "cpu")
    weights = list(model.parameters())
    after: list[torch.Tensor] = []
    lr = float(params["lr"])

    def served():
        for i, batch in enumerate(batches):
            if i:
                after.append(torch.cat([p.detach().reshape(-1) for p in weights]))
            yield batch

    class Loader:
        def __iter__(self):
            return served()

        def __len__(self):
            return len(batches)

    module.train(model, Loader(), loss_fn, lambda group: torch.optim.Adam(list(group), lr=lr))
    after.append(torch.cat([p.detach().reshape(-1) for p in weights]))
    return [float((a - r).norm() / r.norm()) for a, r in zip(after, ref.params[1:], strict=True)]


@pytest.mark.parametrize("path", RIGHT, ids=lambda p: p.stem)
def test_right_loops_are_far_inside_the_cpu_line(path):
    """Right loops (the default Adam 0, a fused one 2.0e-15 over every place): within a
    twentieth of the line."""
    assert max(_trajectory(path)) <= checks.TOLERANCE["cpu"] / 20


@pytest.mark.parametrize("name", COPIES)
def test_low_precision_copies_are_far_outside_the_cpu_line(name):
    """Each style is ≥ 1000× the line at some batch (float32's second batch: 1.5e-9)."""
    assert max(_trajectory(GOLDEN / f"{name}.py")) >= 1000 * checks.TOLERANCE["cpu"]


def _exercise(exercise_id):
    found = load_course(get_settings().lessons_dir).exercise(exercise_id)
    assert found is not None
    return found


@pytest.mark.slow  # real sandboxes, real torch
class TestLowPrecisionCopies:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return _exercise("model-memory/step-in-backward")

    @pytest.mark.parametrize("name", COPIES)
    def test_every_gradient_kept_as_a_lower_precision_copy_fails(self, run, mode, name):
        outcome = run((GOLDEN / f"{name}.py").read_text())
        assert outcome.status == "failed", outcome.verdict
        assert outcome.verdict["diagnosis"] is None, outcome.verdict
        trajectory = outcome.verdict["checks"][0]
        assert trajectory["status"] == "failed", outcome.verdict
        assert "away from where the plain loop puts them" in trajectory["message"], outcome.verdict

    @pytest.mark.parametrize("path", RIGHT, ids=lambda p: p.stem)
    def test_right_loops_pass(self, run, mode, path):
        outcome = run(path.read_text())
        assert outcome.status == "passed", outcome.verdict
