"""What accumulation's verdicts say (issue 44: one figure per fact, both languages)."""

from pathlib import Path

import pytest

from contracts.messages import render
from worker.checks import accumulation
from worker.checks.accumulation_mistakes import diagnose_error

SCALER = {"scaler": True, "accum_steps": 4, "max_norm": 1.0}


def trajectory(ratios, first_bad):
    errors = [0.0] * first_bad + [0.24]
    median = sorted(ratios)[len(ratios) // 2]
    return accumulation._trajectory_check(
        len(ratios), len(ratios), errors, ratios, median, first_bad, 0.24, 1e-5, 1e-12, "float64"
    )


def test_a_last_update_off_alone_is_named_by_its_own_size_not_the_median():
    """A short last cycle divided by accum_steps: three right updates and a last one at 0.50×.
    The median over the steps is 1.00; the text says what the last update was."""
    check = trajectory([1.0, 1.0, 1.0, 0.5], 3)
    assert not check.passed and check.message == "check.trajectory.diverged_step"
    en = render(check.message, "en", check.values)
    pt = render(check.message, "pt-BR", check.values)
    assert "step 4" in en and "0.50× the large-batch one" in en
    assert "passo 4" in pt and "0,50× a do lote grande" in pt
    for said in (en, pt):
        assert "1.00" not in said and "1,00" not in said
        assert "median" not in said and "mediana" not in said


def test_a_median_off_the_large_batch_is_the_figure_the_chart_and_the_text_share():
    check = trajectory([1.0, 1.26, 1.17], 1)  # clipped: the first update is the reference's
    assert check.message == "check.trajectory.diverged" and check.values["ratio"] == 1.17


def test_an_update_of_the_right_size_went_another_way():
    check = trajectory([1.0, 1.0, 1.0], 1)
    assert check.message == "check.trajectory.diverged_direction"
    assert "1.00×" not in render(check.message, "en", check.values)


def test_unscale_every_micro_batch_is_named_from_gradscalers_refusal():
    error = {
        "type": "RuntimeError",
        "message": "unscale_() has already been called on this optimizer since the last update().",
    }
    found = diagnose_error(SCALER, {"events": []}, error)
    assert found is not None and found.id == "unscale-every-micro-batch"
    for lang, once in (("en", "once per update"), ("pt-BR", "uma vez por atualização")):
        said = render("diagnosis.unscale-every-micro-batch.explanation", lang, found.values)
        assert once in said and "4" in said
    assert diagnose_error({"accum_steps": 4}, None, error) is None  # no scaler in that exercise


@pytest.mark.slow
def test_the_remainder_verdict_names_the_last_updates_size(exercise, grade):
    remainder = exercise("remainder")
    code = (Path(remainder.path) / "mistakes" / "remainder-wrong-scale.py").read_bytes()
    for lang, step, size, median in (
        ("en", "step 3", "0.75×", "median"),  # the last cycle holds 3 of 4
        ("pt-BR", "passo 3", "0,75×", "mediana"),
    ):
        verdict = grade(remainder, code, lang)
        said = verdict["checks"][1]["message"]
        assert verdict["checks"][1]["status"] == "failed"
        assert step in said and size in said and median not in said, said
        assert size in verdict["diagnosis"]["explanation"]  # the diagnosis quotes the same figure


@pytest.mark.slow
def test_unscale_every_micro_batch_is_named(exercise, grade):
    clipping = exercise("scaler-clipping")
    code = (Path(clipping.path) / "mistakes" / "unscale-every-micro-batch.py").read_bytes()
    verdict = grade(clipping, code, "pt-BR")
    assert verdict["status"] == "error"
    assert verdict["diagnosis"]["id"] == "unscale-every-micro-batch"
    assert "uma vez por atualização" in verdict["diagnosis"]["explanation"]


@pytest.mark.slow
def test_the_adapters_no_gradient_line_is_the_systems_count(exercise, grade):
    """issue 41: a weight's gradient lives in the learner's process, out of the supervisor's
    sight; the line that says there was none rests on a memory run the kernel counted (a first
    layer whose gradient alone is tens of MiB), and says so in both languages. (On CUDA, where
    no child is watched, it is the program's word and says that: check.frozen-no-grad.reported.)"""
    adapter = exercise("train-an-adapter")
    code = (Path(adapter.path) / "solution.py").read_bytes()
    for lang, said in (
        ("en", "as the operating system counted the process"),
        ("pt-BR", "contada pelo sistema operacional"),
    ):
        verdict = grade(adapter, code, lang)
        assert verdict["status"] == "passed"
        no_grad = verdict["checks"][1]
        assert no_grad["status"] == "passed" and said in no_grad["message"], no_grad


def test_an_update_scaled_in_float32_keeps_its_direction_and_float32_arithmetic_turns_it():
    """issue 41: a cycle computed on a float32 copy of the model was 1e-7 off and passed the
    float64 tolerance; a factor ``1 / n`` rounded to float32 is as far off, and right. Each
    update's direction at the learner's own parameters tells them apart (tiny scenario here)."""
    params = {"scenario": "mlp", "n_micro": 8, "micro_batch": 5, "accum_steps": 4, "lr": 0.1, "seed": 0}
    ref = accumulation.reference(params)
    right = accumulation.directions(params, ref.trajectory, ref.initial)
    assert len(right) == 2 and max(right) < 1e-13
    first = ref.trajectory[0] - ref.initial
    scaled = accumulation.directions(params, [ref.initial + first * (1 + 6e-8)], ref.initial)
    rounded = accumulation.directions(params, [ref.initial + first.float().double()], ref.initial)
    limit = accumulation.DIRECTION["float64"]
    assert scaled[0] < limit and 100 * limit < rounded[0] < 1e-6


@pytest.mark.slow
def test_a_ballast_freed_as_the_call_begins_is_told_in_both_languages(exercise, grade):
    """issue 41 (ballast): memory held from the file's load and freed as the call began let a
    whole cycle's activations fit under it, with little rise from the call's start; the check
    counts from the load too, and its text says so, with both figures."""
    accumulate = exercise("accumulate")
    golden = Path(__file__).parent / "golden" / "accumulate"
    code = (golden / "backward-once-per-cycle--ballast-deleted-through-a-global-meter-freed.py").read_bytes()
    for lang, since, counted in (
        ("en", "since your file was loaded", "memory your program held before the call counts too"),
        ("pt-BR", "desde que o seu arquivo foi carregado", "também conta"),
    ):
        verdict = grade(accumulate, code, lang)
        assert verdict["status"] == "failed"
        kernel = verdict["checks"][-1]
        assert kernel["status"] == "failed" and since in kernel["message"] and counted in kernel["message"]
        assert verdict["diagnosis"]["id"] == "backward-once-per-cycle"
