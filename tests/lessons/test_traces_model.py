"""bench/traces.py --model: the queue model's traces, in the recorded ones' format, no GPU needed."""

import json

from bench.traces import KEEP, main
from worker.harness import gputrace


def test_model_mode_writes_three_compact_traces_that_say_they_are_modelled(tmp_path, capsys):
    assert main(["--model", "--out", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "compute.json",
        "input.json",
        "launch.json",
        "traces.json",
    ]
    meta = json.loads((tmp_path / "traces.json").read_text())
    assert meta["source"] == "modelled"
    assert "gpu" not in meta and "driver" not in meta  # nothing claims a GPU recorded them
    for loop in ("input", "compute", "launch"):
        facts = meta["loops"][loop]
        assert facts["bottleneck"] == loop and facts["trace"] == f"{loop}.json"
        trace = json.loads((tmp_path / facts["trace"]).read_text())
        kinds = {e["ph"] for e in trace["traceEvents"]}
        assert kinds == {"X", "M"}
        cats = {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"}
        assert cats <= KEEP and {"user_annotation", "gpu_user_annotation", "kernel", "cuda_runtime"} <= cats
        steps = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
        assert [s for s in steps if s.startswith("ProfilerStep#")] == [
            f"ProfilerStep#{n}" for n in range(1, 6)
        ]
        assert facts["events"] == len(trace["traceEvents"])
    assert "modelled traces" in capsys.readouterr().out


def test_the_model_is_a_queue_the_host_runs_ahead_of():
    """Every kernel starts after its launch began and after the one before it on its stream;
    the launch-bound loop's host takes longer per launch than its kernels run."""
    for loop in gputrace.LOOPS:
        trace = gputrace.model_trace(loop)
        launches = {
            e["args"]["correlation"]: e
            for e in trace["traceEvents"]
            if e.get("cat") == "cuda_runtime" and "args" in e
        }
        ends: dict[int, float] = {}
        device = sorted(
            (e for e in trace["traceEvents"] if e.get("cat") in gputrace.DEVICE), key=lambda e: e["ts"]
        )
        for e in device:
            assert e["ts"] >= launches[e["args"]["correlation"]]["ts"]
            assert e["ts"] >= ends.get(e["tid"], 0.0) - 0.002  # one at a time on a stream (ns rounding)
            ends[e["tid"]] = e["ts"] + e["dur"]
    launch = gputrace.model_trace("launch")["traceEvents"]
    kernels = [e["dur"] for e in launch if e.get("cat") == "kernel"]
    calls = [e["dur"] for e in launch if e.get("name") == "cudaLaunchKernel"]
    assert max(kernels) < 10 and len(kernels) > 1000 and sum(calls) > sum(kernels)


def test_the_model_is_the_same_every_time():
    assert gputrace.digest(gputrace.model_trace("compute")) == gputrace.digest(
        gputrace.model_trace("compute")
    )
