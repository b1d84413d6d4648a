"""The "measure" kind (lesson 4, "measure it on your card"): the verdict is a table of what
the learner's loop cost on the grader's device, and the same checks hold on a CPU and a GPU.

``traces/measure-h200/<submission>.json``: the harness's data for the exercise's own
solution and mistakes, run on an NVIDIA H200 (torch 2.11, CUDA 13); the CPU side is graded
here, in the sandbox, by the slow tests. The traces predate the supervisor's observations
(``data["observed"]``); ``load`` adds them as a CUDA worker records them now: there the
learner's code runs in the supervisor's own process (``mode: "inline"``), so the steps it
counted and the parameters it read are the ones the run recorded.
"""

import json
from pathlib import Path

import pytest

from contracts.messages import render
from tests.worker.test_golden import assert_answer
from worker.checks import measure

TRACES = Path(__file__).parent / "traces" / "measure-h200"
CONFIGS = ["fp32", "low", "accum", "checkpoint", "all"]
ROWS = ["measure_fp32", "measure_low", "measure_accum", "measure_checkpoint", "measure_all"]


def load(name):
    data = json.loads((TRACES / f"{name}.json").read_text())
    events = [
        ["step", CONFIGS.index(c), 0.0, -1]
        for c, config in data["configs"].items()
        for _ in range(config["steps"])
    ]
    run = data["reference_run"]
    events += [["reference-step", -1, 0.0, i] for i in range(len(run["steps"]))]
    data["observed"] = {
        "mode": "inline",
        "counts": {},
        "events": events,
        "events_dropped": 0,
        "snapshots": run["steps"],
        "final_params": run["final_params"],
        "meters": [],
        "interfered": None,
    }
    return data


@pytest.fixture(scope="module")
def params(exercise):
    return exercise("measure-it").check_params


def lines(evaluation, lang="en"):
    return {c.name: render(c.message, lang, c.values) for c in evaluation.checks}


@pytest.mark.parametrize("name", ["solution", "precision-ignored", "checkpoint-ignored"])
def test_a_gpu_run_is_judged_like_a_cpu_run(params, name):
    data = load(name)
    evaluation = measure.evaluate(params, data, "cuda")
    assert evaluation.passed == (name == "solution")
    assert (evaluation.diagnosis.id if evaluation.diagnosis else "solution") == name


def test_a_gpu_verdict_names_the_card_and_its_memory_counter(params):
    data = load("solution")
    evaluation = measure.evaluate(params, data, "cuda")
    text = lines(evaluation)
    assert text["measure_device"].startswith("Measured on NVIDIA H200.")
    assert "max_memory_allocated()" in text["measure_device"] and "bfloat16" in text["measure_device"]
    assert [c.name for c in evaluation.checks][1:6] == ROWS
    for row in ROWS:
        assert " ms per step · " in text[row] and " samples/s · peak " in text[row]
    assert evaluation.metrics["peak_measure"] == "max_memory_allocated"
    assert evaluation.metrics["checkpoint_peak_bytes"] < 0.9 * evaluation.metrics["fp32_peak_bytes"]


@pytest.mark.slow
def test_a_cpu_verdict_says_so_and_shows_the_cpus_numbers(graded):
    verdict = graded["bank", "measure-it", "solution"]
    assert_answer(verdict, "solution")
    device, *rows = verdict["checks"][:6]
    assert device["message"].startswith("This worker has no GPU: every number below is the CPU's.")
    assert [r["name"] for r in rows] == [
        "float32",
        "Low precision",
        "Gradient accumulation",
        "Checkpointing",
        "All three",
    ]
    assert all(" ms per step · " in r["message"] for r in rows)
    metrics = verdict["metrics"]
    assert metrics["measured_on"] == "cpu" and metrics["peak_measure"] == "live_tensor_bytes"
    assert metrics["low_precision"] == "bfloat16"
    # what the lesson claims, in the CPU's own bytes
    assert metrics["checkpoint_peak_bytes"] < 0.9 * metrics["fp32_peak_bytes"]
    assert metrics["accum_peak_bytes"] < metrics["fp32_peak_bytes"]
    assert metrics["low_peak_bytes"] < metrics["fp32_peak_bytes"]


def test_a_configuration_that_stopped_leaves_the_later_rows_unrun(params):
    data = load("solution")
    data["configs"] = {"fp32": data["configs"]["fp32"]}
    data.pop("reference_run")
    evaluation = measure.evaluate(params, data, "cuda")
    assert not evaluation.passed
    assert [c.name for c in evaluation.checks if not c.passed] == ROWS[1:]
    assert "não rodou" in lines(evaluation, "pt-BR")["measure_low"]


def test_a_time_that_runs_backwards_is_interference(params):
    """A clock patched to run backwards put -250,000 ms a step into the stored metrics; the
    times pass nothing, but what is shown must be a time."""
    data = load("solution")
    data["configs"]["fp32"]["seconds"] = -1000.0
    with pytest.raises(measure.Interfered, match="fp32"):
        measure.evaluate(params, data, "cuda")


def test_the_low_precision_is_bfloat16_on_every_device(monkeypatch):
    """float16 on a GPU without native bfloat16 ran with no GradScaler (issue 28): a loop that
    passed here would train float16 unscaled on such a card. (No CUDA call is made: this runs
    on a CPU.)"""
    import importlib

    import torch

    harness = importlib.import_module("worker.harness.measure")  # the harness's, not the check's

    for device in ("cpu", "cuda", "cuda:1"):
        assert harness.low_precision(device) is torch.bfloat16


def test_step_times_give_a_median_and_the_middle_half():
    config = {"steps": 4, "seconds": 0.1, "step_ms": [9.0, 1.0, 2.0, 3.0, 4.0, 100.0, 2.5, 3.5]}
    median, low, high, timed = measure.step_times(config)
    assert (median, timed) == (3.25, 8), "one 100 ms step (a busy moment) does not move the median far"
    assert (low, high) == (2.375, 5.25)
    assert measure.step_times({"steps": 4, "seconds": 0.02}) == (5.0, 5.0, 5.0, 0), "a trace from before"


def test_a_trace_with_step_times_shows_the_spread(params):
    data = load("solution")
    data["rounds"] = 3
    for config in data["configs"].values():
        ms = config["seconds"] * 1000 / config["steps"]
        config["step_ms"] = [ms * f for f in (0.9, 1.0, 1.0, 1.1) * 3]
    evaluation = measure.evaluate(params, data, "cuda")
    assert evaluation.passed
    text = lines(evaluation)
    assert "median of every step of 3 timed runs" in text["measure_device"]
    assert "synchronize()` at every step" in text["measure_device"]
    assert " ms per step · median of 12 steps, middle half " in text["measure_fp32"]
    assert "mediana de 12 passos, metade central" in lines(evaluation, "pt-BR")["measure_fp32"]
    metrics = evaluation.metrics
    for name in CONFIGS:
        assert metrics[f"{name}_ms_low"] <= metrics[f"{name}_ms_per_step"] <= metrics[f"{name}_ms_high"]
        assert metrics[f"{name}_timed_steps"] == 12


@pytest.mark.parametrize("times", [[1.0, -2.0], [1.0, "fast"], {"a": 1}, [1.0] * 257])
def test_step_times_that_are_not_times_are_interference(params, times):
    data = load("solution")
    data["configs"]["low"]["step_ms"] = times
    with pytest.raises(measure.Interfered, match="low"):
        measure.evaluate(params, data, "cuda")


@pytest.mark.slow
def test_the_solution_graded_on_this_cpu_has_spreads_and_still_passes(exercise, grade):
    """End to end, in the sandbox: the exercise's own solution passes, every configuration is
    timed over 3 runs of 4 steps, and the chart's caption says the CPU."""
    from app.submissions.figures import figures

    found = exercise("measure-it")
    verdict = grade(found, (Path(found.path) / "solution.py").read_bytes())
    assert_answer(verdict, "solution")
    metrics = verdict["metrics"]
    for name in CONFIGS:
        assert metrics[f"{name}_timed_steps"] == 12
        assert 0 < metrics[f"{name}_ms_low"] <= metrics[f"{name}_ms_per_step"] <= metrics[f"{name}_ms_high"]
    assert verdict["checks"][0]["message"].startswith(
        "This worker has no GPU: every number below is the CPU's."
    )
    chart = next(c for c in figures(verdict).charts if c.id == "configurations-time")
    assert "this worker's CPU (it has no GPU" in chart.note and "synchronised" not in chart.note
    assert all(bar.detail and bar.spread for bar in chart.bars)
    assert metrics["harness_run_ms"] < 20_000, metrics  # ~1–2 s on an idle CPU; this one may be shared


@pytest.mark.parametrize(
    ("name", "failed"),
    [
        ("solution", []),
        # the checkpointed run comes last and is read against the process's lifetime
        # high-water mark, which the ignored low precision left at 1.0x: it fails too (a loop
        # already failing is read high, never a right loop low)
        (
            "precision-ignored",
            [
                "Memory of all three at once, as the system counted it",
                "Low precision's memory, as the system counted it",
                "Checkpointing's memory, as the system counted it",
            ],
        ),
        (
            "checkpoint-ignored",
            [
                "Memory of all three at once, as the system counted it",
                "Checkpointing's memory, as the system counted it",
            ],
        ),
        (
            "cast-instead-of-autocast",
            [
                "Memory of all three at once, as the system counted it",
                "Low precision's memory, as the system counted it",
            ],
        ),
    ],
)
def test_low_precision_and_checkpointing_pass_on_what_the_supervisor_and_the_system_saw(graded, name, failed):
    """Issue 41: on the CPU, the low-precision and checkpointed runs are judged once more on a
    large batch from the parameters the supervisor read and the memory the kernel counted; the
    dtypes and recomputations the loop's process reported only name the mistake. A model cast
    to bfloat16 leaves the float32 parameters the supervisor reads where they were."""
    verdict = graded["bank", "measure-it", name]
    kernel = {c["name"]: c for c in verdict["checks"] if "as the system counted it" in c["name"]}
    assert len(kernel) == 3, verdict["checks"]
    assert [n for n, c in kernel.items() if c["status"] != "passed"] == failed


def with_config_readings(params, data, chosen):
    """``data`` with a ``config-end`` reading per configuration, as the supervisor takes them:
    each configuration's parameters (those ``harness.measure.read_of`` shares) where
    ``chosen[name]`` ("float32" or "low") arithmetic puts them, recomputed by the checks."""
    ref = measure.config_reference(params)
    k = int(params["accum_steps"])
    mem = measure.memory_reference(params)
    start = measure._size(params) + (len(measure.MEMORY_RUNS) * mem.params.numel() if mem else 0)
    shot = [0.0] * start
    for name in CONFIGS:
        accum = k if name in ("accum", "all") else 1
        shot += (ref.float32 if chosen[name] == "float32" else ref.low)[accum].tolist()
    seen = data["observed"]
    seen["snapshots"] = [*seen["snapshots"], shot]
    seen["events"] += [["config-end", n, 0.0, len(seen["snapshots"]) - 1] for n in range(len(CONFIGS))]
    return data


RIGHT = {"fp32": "float32", "low": "low", "accum": "float32", "checkpoint": "float32", "all": "low"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_autocast_where_asked_rests_on_the_parameters_read_not_on_the_dtypes(params, device):
    """Issue 41: the probe's dtypes live in the learner's process, and were rewritten through its
    hooks; the line passes only where each configuration's parameters, as the supervisor read
    them, land where its precision's arithmetic (recomputed here) puts them. The dtypes below
    all say what was asked."""
    assert measure.evaluate(params, with_config_readings(params, load("solution"), RIGHT), device).passed
    for name, wrong in (("all", "float32"), ("low", "float32"), ("fp32", "low"), ("accum", "low")):
        data = with_config_readings(params, load("solution"), RIGHT | {name: wrong})
        evaluation = measure.evaluate(params, data, device)
        assert not evaluation.passed and evaluation.diagnosis is None
        [line] = [c for c in evaluation.checks if c.name == "measure_precision"]
        expected = "observed_float32" if wrong == "low" else "observed_low"
        assert line.message == f"check.measure_precision.{expected}", line
        text = lines(evaluation)["measure_precision"]
        assert "your parameters ended" in text and "did not compute in" in text
        assert "seus parâmetros terminaram" in lines(evaluation, "pt-BR")["measure_precision"]


@pytest.mark.parametrize(
    ("recomputed", "passed", "left"),
    [
        ([0, 1, 2, 3], True, None),
        ([0, 1, 2], True, None),
        ([0, 2], False, "2"),
        ([0], False, "2, 3"),
        ([], False, None),
    ],
)
def test_a_block_before_the_last_left_out_of_checkpointing_fails(params, recomputed, passed, left):
    """The probe's count of the blocks recomputed in backward (the child's word: it only fails).
    The last block may run plain: checkpointing it saves nothing (``checkpoint_sequential``)."""
    data = load("solution")
    for name in ("checkpoint", "all"):
        data["configs"][name] |= {
            "recomputed_blocks": recomputed,
            "blocks": 4,
            "recomputed": bool(recomputed),
        }
    evaluation = measure.evaluate(params, data, "cuda")
    line = next(c for c in evaluation.checks if c.name == "measure_checkpoint_peak")
    assert line.passed == passed == evaluation.passed
    if left is not None:
        assert line.message == "check.measure_checkpoint_peak.partial"
        assert f"{left} of 4" in lines(evaluation)["measure_checkpoint_peak"]
        assert f"{left} de 4" in lines(evaluation, "pt-BR")["measure_checkpoint_peak"]
        assert evaluation.diagnosis is None


@pytest.mark.parametrize(
    "garbage", [{"recomputed_blocks": [7], "blocks": 4}, {"recomputed_blocks": "0,1", "blocks": 4}]
)
def test_recomputed_blocks_that_are_not_the_models_are_interference(params, garbage):
    data = load("solution")
    data["configs"]["all"] |= garbage
    with pytest.raises(measure.Interfered, match="recomputed blocks"):
        measure.evaluate(params, data, "cuda")
