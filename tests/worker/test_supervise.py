"""Trusted measurement (worker/harness/supervise.py): the supervisor reads the shared parameters
itself, and the checks refuse a report that disagrees with what was observed. Each supervisor
runs in a fresh interpreter of its own (it makes itself a subreaper and kills its descendants:
never pytest's). The supervisor and its child without torch (the meters, the protocol, the
sweep, the filter, the items): tests/supervisor/.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from worker.checks import Interfered, accumulation, checkpointing, phases, pipeline
from worker.harness import scenarios

ROOT = Path(__file__).resolve().parents[2]  # the repository: the harness is the package worker.harness


def supervised(body: str, alone: bool = False) -> dict:
    """Run ``body`` (defines ``part(link)``, returning the report's bytes) in a child of a
    supervisor in a fresh interpreter; its observations, the report and how the child ended."""
    script = f"""
import json, os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import quiet
quiet.silence()
import torch
from worker.harness import supervise
supervise.harden()
weights = torch.zeros(3, dtype=torch.float64)
shared = supervise.Shared([weights])
{body}
supervisor = supervise.Supervisor(shared, 1 << 20, items=globals().get("items"), alone={alone})
report, death = supervisor.run(part)
seen = supervisor.observer.result(shared.snapshot())
seen["items"] = supervisor.items.result() if supervisor.items else None
print(json.dumps({{"observed": seen, "report": report, "death": death}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


REPORT = 'json.dumps({"t": "report", "data": {}, "error": None, "output": "", "dropped": 0}).encode()'


def test_the_supervisor_reads_what_the_child_computed_in_shared_memory():
    out = supervised(f"""
def part(link):
    for step in range(3):
        weights.add_(1.0)  # the child's optimizer step, in place
        link.sync("step", step, snapshot=True)
    weights.mul_(10)
    return {REPORT}
""")
    seen = out["observed"]
    assert seen["snapshots"] == [[1.0] * 3, [2.0] * 3, [3.0] * 3]
    assert seen["final_params"] == [30.0] * 3  # read with the child dead
    assert seen["counts"] == {"step": 3} and out["death"] is None


# ---------------------------------------------------------------- the checks


def accumulation_data(steps, final, peak=0):
    """The reported half of an accumulation trace with the observed half as the supervisor
    writes it: three steps, each snapshot the parameters after it."""
    seen = {
        "mode": "fork",
        "counts": {"step": 3},
        "events": [["step", t, 0.0, t] for t in range(3)],
        "events_dropped": 0,
        "snapshots": [[0.1 * t] * 4 for t in range(1, 4)],
        "final_params": [0.3] * 4,
        "meters": [{"peak": 100, "packed": 1000, "freed": 900, "messages": 5}],
        "interfered": None,
    }
    return {
        "steps_total": len(steps),
        "steps": [{"params": p} for p in steps],
        "final_params": final,
        "peak_saved_bytes": peak,
        "observed": seen,
    }


def test_accumulation_refuses_a_report_that_differs_from_the_observations():
    honest = [[0.1 * t] * 4 for t in range(1, 4)]
    assert accumulation.observations(accumulation_data(honest, [0.3] * 4, 100), 4)[1] == 3
    with pytest.raises(Interfered, match="parameters"):
        accumulation.observations(accumulation_data([[0.0] * 4] * 3, [0.3] * 4, 100), 4)
    with pytest.raises(Interfered, match="reported memory"):  # the meter reset before the report
        accumulation.observations(accumulation_data(honest, [0.3] * 4, 0), 4)
    with pytest.raises(Interfered, match="steps"):
        accumulation.observations(accumulation_data(honest[:2], [0.3] * 4, 100), 4)
    with pytest.raises(Interfered, match="no observations"):
        accumulation.observations({**accumulation_data(honest, [0.3] * 4, 100), "observed": None}, 4)


def test_checkpointing_refuses_a_gradient_that_is_not_the_step_observed():
    params = {"lr": 0.5}
    before, after = [1.0, 2.0], [0.5, 2.5]  # the step: -lr * (1, -1)
    seen = {
        "counts": {"call": 1},
        "events": [["call", 0, 0.0, 0]],
        "events_dropped": 0,
        "snapshots": [before],
        "final_params": after,
        "interfered": None,
        "meters": [{"peak": 64, "packed": 64, "freed": 0, "messages": 1}],
    }
    data = {"peaks": [64], "final_params": after, "steps": [{"grad": [1.0, -1.0]}], "observed": seen}
    checkpointing._observations(params, data, 2)
    with pytest.raises(Interfered, match="gradients"):
        checkpointing._observations(params, {**data, "steps": [{"grad": [0.0, 0.0]}]}, 2)
    with pytest.raises(Interfered, match="reported memory"):
        checkpointing._observations(params, {**data, "peaks": [0]}, 2)


def _run(points: dict) -> dict:
    """A find-the-bottleneck run as the harness reports it: an answer, its ranges, its points."""
    return {"answer": "data", "ranges": [["data", 0, 1]], "points": points}


def test_find_the_bottleneck_counts_and_slow_phases_are_the_supervisors():
    params = {"slow": ["data", "backward"]}
    points = {"data": [[0, 1]] * 6, **{p: [[0, 1]] * 2 for p in ("forward", "backward", "optimizer")}}
    labels = ["fetch"] * 2 + ["forward", "backward", "step"] * 2
    seen = {
        "events": [[label, run, 0.0, -1] for run in (0, 1) for label in labels],
        "events_dropped": 0,
        "interfered": None,
        "slowed": ["backward", "fetch"],
    }
    with pytest.raises(Interfered, match="reported events"):  # two fetches served, six reported
        phases._observed(params, {"runs": [_run(points)] * 2, "observed": seen})
    honest = {**points, "data": [[0, 1]] * 2}
    runs = phases._observed(params, {"runs": [_run(honest)] * 2, "observed": seen})
    assert runs[0]["slow"] == "backward"  # the phase the supervisor drew for run 0, not the child's
    with pytest.raises(Interfered, match="reported calls"):  # one loop reported of the two asked
        phases._observed(params, {"runs": [_run(honest)], "observed": seen})
    with pytest.raises(Interfered, match="slow phases"):
        phases._observed(params, {"runs": [_run(honest)] * 2, "observed": {**seen, "slowed": []}})


PIPELINE = {"samples": 10, "batch_size": 4, "min_speedup": 1.3}


def pipeline_start():
    torch.manual_seed(0)
    return scenarios.pipeline_model().to(torch.float64).parameters()


def pipeline_data(batches, ends, ms=(1000.0, 500.0, 400.0, 450.0)):
    """A pipeline trace whose baseline and three attempts started from the model's seeded
    parameters and, by the supervisor's reading, ended on ``ends`` (one vector per run)."""
    start = torch.cat([p.detach().reshape(-1) for p in pipeline_start()]).tolist()
    events, snapshots, clock = [], [], 0.0
    for k, end in enumerate(ends):
        events.append(["run", k, clock, len(snapshots)])
        snapshots.append(start)
        clock += ms[k]
        events.append(["done", k, clock, len(snapshots)])
        snapshots.append(end)
    seen = {
        "events": events,
        "events_dropped": 0,
        "snapshots": snapshots,
        "interfered": None,
        "items": {"seeds": ["11", "12", "13", "14"], "served": [10] * 4},
    }
    return {"attempts": 3, "loader": {"type": "DataLoader"}, "batches": batches, "observed": seen}


def test_the_input_pipeline_is_judged_on_the_parameters_and_times_the_supervisor_observed():
    start = torch.cat([p.detach().reshape(-1) for p in pipeline_start()]).tolist()
    right = pipeline.expected_batches(PIPELINE)
    ends = [pipeline.trained(PIPELINE, start, seed).tolist() for seed in (11, 12, 13, 14)]
    result = pipeline.evaluate(PIPELINE, pipeline_data(right, ends), "cpu")
    assert result.passed
    assert result.metrics["speedup"] == 2.5  # 1000 ms against the fastest attempt's 400
    # the right indices reported, but the parameters moved by other items (another run's)
    replayed = pipeline_data(right, ends[:2] + [ends[1], ends[1]])
    check = pipeline.evaluate(PIPELINE, replayed, "cpu").checks[0]
    assert (check.passed, check.message) == (False, "check.batches.altered")
    regrouped = [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    with pytest.raises(Interfered, match="batches"):  # right parameters, other batches reported
        pipeline.evaluate(PIPELINE, pipeline_data(regrouped, ends), "cpu")
    extra = pipeline_data(right, ends)
    extra["observed"]["events"].insert(2, ["run", 1, 999.0, 1])  # a run opened again by hand
    with pytest.raises(Interfered, match="runs"):
        pipeline.evaluate(PIPELINE, extra, "cpu")
