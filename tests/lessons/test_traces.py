"""bench/traces.py, the recorder of lesson 3's GPU traces: what it keeps and what it reads."""

import json

import torch
from torch.profiler import profile, record_function

from bench.traces import compact, device_busy


def _event(cat: str, name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 0}


def test_a_trace_keeps_ranges_and_device_work_and_drops_every_cpu_op(tmp_path):
    with profile() as prof, record_function("data"):
        torch.ones(8).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    raw = json.loads(path.read_text())
    kept = compact(raw)
    cats = {e.get("cat") for e in kept["traceEvents"] if e.get("ph") == "X"}
    assert "cpu_op" in {e.get("cat") for e in raw["traceEvents"]}
    assert cats == {"user_annotation"}
    assert [e["name"] for e in kept["traceEvents"] if e.get("cat") == "user_annotation"] == ["data"]


def test_device_busy_is_the_union_of_device_intervals_over_the_steps():
    trace = {
        "traceEvents": [
            _event("user_annotation", "data", 0, 50),
            _event("user_annotation", "optimizer", 50, 50),  # the steps span 0..100 us
            _event("kernel", "gemm", 10, 20),
            _event("kernel", "gemm", 20, 20),  # overlaps the first: counted once
            _event("gpu_memcpy", "Memcpy HtoD", 90, 30),  # runs past the end: 10 us inside
            _event("cuda_runtime", "cudaLaunchKernel", 0, 100),  # host-side: not device time
        ]
    }
    busy, span_ms = device_busy(trace)
    assert span_ms == 0.1
    assert abs(busy - 0.4) < 1e-9  # 30 us of kernels + 10 us of copy in 100 us
