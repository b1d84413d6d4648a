"""Golden submissions: each file's name says what the grader must answer.

``golden/<exercise>/<expected>--<style>.py``: ``expected`` is ``pass``, a diagnosis id, or
``fail``: wrong in a way no mistake id names, so it must not pass and no id may be put on it.
With the exercises' own ``mistakes/<id>.py`` (the second style), every mistake id of
every exercise is caught in at least two coding styles.
"""

from pathlib import Path

import pytest

from tests.worker.conftest import EXERCISES, GOLDEN, GOLDEN_FILES
from worker import grading, sandbox
from worker.grading import format_verdict

FIXED = {
    "loss-not-scaled",
    "zero-grad-every-micro-batch",
    "step-every-micro-batch",
    "never-zero-grad",
    "wrong-boundary",
    "wrong-scale",
}


def expected(path: Path) -> str:
    return path.stem.split("--")[0]


def mistake_ids(exercise) -> set[str]:
    return {p.stem for p in (Path(exercise.path) / "mistakes").glob("*.py")}


def assert_answer(verdict, answer):
    if answer in ("pass", "solution"):
        assert verdict["status"] == "passed", format_verdict(verdict)
        assert verdict["diagnosis"] is None
    elif answer == "fail":
        assert verdict["status"] in ("failed", "error"), format_verdict(verdict)
        assert verdict["diagnosis"] is None, format_verdict(verdict)
    else:
        assert verdict["status"] in ("failed", "error"), format_verdict(verdict)
        assert (verdict["diagnosis"] or {}).get("id") == answer, format_verdict(verdict)


@pytest.mark.slow
@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_submission(path, graded):
    assert_answer(graded["golden", path.parent.name, path.stem], expected(path))


@pytest.mark.slow
@pytest.mark.parametrize("slug", EXERCISES)
def test_exercise_bank(slug, graded, exercise):
    """solution.py passes; each mistakes/<id>.py is diagnosed as <id> (what check_exercise
    proves, here from the shared pool)."""
    names = ["solution", *sorted(mistake_ids(exercise(slug)))]
    for name in names:
        assert_answer(graded["bank", slug, name], name)


@pytest.mark.slow
def test_memory_mistakes_have_right_numbers_but_fail_on_memory(graded):
    for name in ("backward-once-per-cycle--list-sum", "micro-batches-concatenated--chunks"):
        verdict = graded["golden", "accumulate", name]
        # the meter's memory check names the mistake; the kernel's count is what fails it
        steps, trajectory, memory, counted = verdict["checks"]
        assert steps["status"] == trajectory["status"] == "passed"
        assert memory["status"] == counted["status"] == "failed"
        metrics = verdict["metrics"]
        assert metrics["peak_activation_bytes"] >= 3.9 * metrics["reference_peak_activation_bytes"]


@pytest.mark.slow
def test_explanation_quotes_the_learners_numbers(graded):
    verdict = graded["golden", "accumulate", "loss-not-scaled--counter"]
    assert "4.00×" in verdict["diagnosis"]["explanation"]
    assert verdict["metrics"]["optimizer_steps"] == 2  # 8 micro-batches, cycles of 4
    assert verdict["metrics"]["update_ratio"] == pytest.approx(4.0, rel=0.1)
    text = format_verdict(verdict, "en")
    assert "(loss-not-scaled)" in text and text.startswith("Not yet")


@pytest.mark.slow
def test_unknown_mistake_still_says_what_differed(graded):
    verdict = graded["case", "zero-before-step"]
    assert verdict["status"] == "failed"
    assert verdict["diagnosis"] is None
    trajectory = verdict["checks"][1]
    assert trajectory["status"] == "failed"
    assert "passo 1" in trajectory["message"] and "foram 0× as do lote grande" in trajectory["message"]


def test_check_exercise_names_every_problem(exercise, monkeypatch):
    answers = {
        "solution": ("failed", None),
        "token-mean-of-means": ("passed", None),
        "token-padding-counted": ("failed", "token-sum-not-normalised"),
        "token-sum-not-normalised": ("failed", "token-sum-not-normalised"),
        "backward-once-per-cycle": ("failed", "backward-once-per-cycle"),
    }

    def fake_grade(ex, code):
        for name, (status, found) in answers.items():
            if (
                code
                == (Path(ex.path) / ("" if name == "solution" else "mistakes") / f"{name}.py").read_bytes()
            ):
                return {
                    "status": status,
                    "diagnosis": found and {"id": found},
                    "checks": [{"status": "failed", "message": "why"}],
                }
        raise AssertionError("unexpected file")

    grader = grading.Grader(sandbox.Setup("process", "cpu"), pool=None)
    monkeypatch.setattr(grader, "grade", fake_grade)
    problems = grader.check_exercise(exercise("token-loss"))
    assert problems == [
        "gradient-accumulation/token-loss: solution.py does not pass (failed: why)",
        "gradient-accumulation/token-loss: mistakes/token-mean-of-means.py passes",
        "gradient-accumulation/token-loss: mistakes/token-padding-counted.py is diagnosed as "
        "token-sum-not-normalised (failed)",
    ]


def test_every_mistake_id_has_a_second_style(exercise):
    for slug in EXERCISES:
        ids = mistake_ids(exercise(slug))
        golden = {expected(p) for p in (GOLDEN / slug).glob("*.py")}
        assert ids, slug
        assert ids == golden - {"pass", "fail"}, (slug, ids ^ (golden - {"pass", "fail"}))
        assert "fail" in golden, f"{slug}: no golden loop wrong in a way no mistake id names"


def test_fixed_contracts_have_their_mistake_ids(exercise):
    assert mistake_ids(exercise("accumulate")) >= FIXED
    remainder = FIXED | {"remainder-dropped", "remainder-wrong-scale"}
    assert mistake_ids(exercise("remainder")) >= remainder


@pytest.mark.slow
def test_a_failing_trajectory_never_calls_the_update_size_right(graded):
    """'1.00× the large-batch one' beside a failure reads as 'right': the text says the size
    matched and the direction did not instead."""
    for key, verdict in graded.items():
        for check in verdict["checks"]:
            if check["status"] == "failed":
                assert "1.00× the large-batch" not in check["message"], (key, check["message"])


@pytest.mark.slow
def test_a_pass_above_float64_rounding_says_so(graded):
    verdict = graded["golden", "token-loss", "pass--int64-count-reciprocal"]
    trajectory = verdict["checks"][1]
    assert trajectory["status"] == "passed"
    assert "1.0e-5× allowed" in trajectory["message"] and "float32" in trajectory["message"]
    exact = graded["bank", "token-loss", "solution"]["checks"][1]["message"]
    assert "allowed" not in exact


@pytest.mark.slow
def test_scaler_calls_in_order_with_the_wrong_gradient_fail(graded):
    verdict = graded["golden", "amp-loop", "unscaled-backward--scaled-unused"]
    order = verdict["checks"][1]
    assert order["status"] == "failed"
    assert "batch 1" in order["message"] and "the true gradient's" in order["message"]
    assert "1,024" in verdict["diagnosis"]["explanation"]


@pytest.mark.slow
def test_update_called_once_after_the_loop_is_not_called_never(graded):
    diagnosis = graded["golden", "amp-loop", "update-missing--update-after-loop"]["diagnosis"]
    text = diagnosis["title"] + " " + diagnosis["explanation"]
    assert "never" not in text
    assert "step() 1× and update() 0×" in text and "`scaler.unscale_(optimizer)`" in text


@pytest.mark.slow
def test_a_clipped_loop_is_placed_and_sized_by_one_figure(graded):
    """With clipping the first update of 'loss not divided' is clipped to the reference's (off
    only by the clip's epsilon): it diverges at step 2; the check quotes the update size the
    chart shows, the diagnosis the gradient, which clipping does not hide."""
    verdict = graded["golden", "scaler-clipping", "loss-not-scaled--chunks"]
    trajectory = verdict["checks"][1]["message"]
    assert "step 2" in trajectory and "step 1" not in trajectory
    assert f"{verdict['metrics']['update_ratio']:.2f}×" in trajectory
    assert "gradient was 4.00×" in verdict["diagnosis"]["explanation"]
