"""Checks of the "pipeline" kind (lesson 3).

The learner's loader must give the same batches as ``DataLoader(dataset, batch_size)`` —
the same samples, in the same order, the dataset's own inputs — and the loop over it must
be at least ``min_speedup`` times faster than over that baseline, both timed in the same
run (the machines are noisy; ratios travel, milliseconds don't).
"""

from worker.checks import Check, Diagnosis, Evaluation


def expected_batches(params):
    samples, size = int(params["samples"]), int(params["batch_size"])
    return [list(range(i, min(i + size, samples))) for i in range(0, samples, size)]


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    expected = expected_batches(params)
    got = data["batches"]
    flat_got = [i for batch in got for i in batch]
    flat_expected = [i for batch in expected for i in batch]
    values = {
        "samples": len(flat_got),
        "expected": len(flat_expected),
        "batches": len(got),
        "expected_batches": len(expected),
    }
    if got == expected and all(data["genuine"]):
        data_check = Check("batches", True, "check.batches.passed", values)
    elif not all(data["genuine"]):
        data_check = Check("batches", False, "check.batches.altered", values)
    elif flat_got == flat_expected:
        data_check = Check("batches", False, "check.batches.regrouped", values)
    else:
        data_check = Check("batches", False, "check.batches.failed", values)
    speedup = data["baseline_ms"] / max(data["learner_ms"], 1e-3)
    minimum = float(params["min_speedup"])
    timing = {
        "speedup": speedup,
        "baseline": round(data["baseline_ms"]),
        "yours": round(data["learner_ms"]),
        "minimum": minimum,
    }
    fast = Check(
        "throughput",
        speedup >= minimum,
        "check.throughput.passed" if speedup >= minimum else "check.throughput.failed",
        timing,
    )
    checks = [data_check, fast]
    metrics = {
        "speedup": round(speedup, 2),
        "baseline_ms": data["baseline_ms"],
        "learner_ms": data["learner_ms"],
        "loader": data["loader"],
    }
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(params, data, expected, timing)
    return Evaluation(checks, diagnosis, metrics)


def diagnose(params, data, expected, timing):
    """The known mistake the batches and timings show, or None."""
    got = [i for batch in data["batches"] for i in batch]
    wanted = [i for batch in expected for i in batch]
    if len(got) < len(wanted) and set(got) <= set(wanted):
        return Diagnosis(
            "data-skipped",
            {
                "samples": len(got),
                "expected": len(wanted),
                "batches": len(data["batches"]),
                "expected_batches": len(expected),
            },
        )
    if sorted(got) == wanted and got != wanted:
        first = next(i for i, (a, b) in enumerate(zip(got, wanted, strict=True)) if a != b)
        return Diagnosis("order-changed", {"position": first, "got": got[first], "wanted": wanted[first]})
    if got == wanted and timing["speedup"] < timing["minimum"]:
        workers = (data["loader"] or {}).get("num_workers", 0)
        return Diagnosis("still-serial", {**timing, "workers": workers})
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
