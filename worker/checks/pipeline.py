"""Checks of the "pipeline" kind (lesson 3).

The learner's loader must give the same batches as ``DataLoader(dataset, batch_size)`` —
the same samples, in the same order, the dataset's own inputs — and the loop over it must
be at least ``min_speedup`` times faster than over that baseline, both timed in the same
run (the machines are noisy; ratios travel, milliseconds don't).

Both rest on what the sandbox's supervisor observed (``worker/harness/pipeline.py``): the
times are its own, from a run's ``run`` sync to its ``done`` sync, and a run gave the right
batches when the training steps over them, redone here from that run's seed, end on the
parameters the supervisor read. The indices the learner's process reported only name the
mistake.
"""

import torch

from worker.checks import Check, Diagnosis, Evaluation, Interfered, agree, observed
from worker.checks.tensors import flat, vector
from worker.harness import scenarios

ATTEMPTS = 3  # times the learner's loader is timed, the fastest kept, unless the exercise says
ATOL, RTOL = 1e-5, 1e-4  # float32 steps redone on another device or thread count; a wrong batch moves ~1e-2


def attempts(params):
    """How many times the exercise asks for the learner's loader to be timed."""
    return int(params.get("attempts", ATTEMPTS))


def job_inputs(params):
    """The number of attempts, sent with the job (the harness runs as many as are judged)."""
    return {"attempts": attempts(params)}


def expected_batches(params):
    samples, size = int(params["samples"]), int(params["batch_size"])
    return [list(range(i, min(i + size, samples))) for i in range(0, samples, size)]


def _runs(seen, attempts):
    """``[(ms, start parameters, end parameters, seed)]`` of the baseline and each of the
    ``attempts`` the exercise asks for, from the supervisor's events; ``Interfered`` unless they
    are one ``run`` and one ``done`` each, in order, with a seed drawn for each (fewer attempts,
    none included, are not a pass: a speed-up and "right batches" over no attempt are vacuous)."""
    marks = [e for e in seen["events"] if e[0] in ("run", "done")]
    wanted = [[label, k] for k in range(attempts + 1) for label in ("run", "done")]
    seeds = (seen.get("items") or {}).get("seeds") or []
    if [e[:2] for e in marks] != wanted or len(seeds) != attempts + 1 or seen["events_dropped"]:
        raise Interfered("runs", detail="the runs the supervisor saw are not the ones reported")
    if any(e[3] < 0 for e in marks):
        raise Interfered("missing", detail="a run without the parameters read")
    snapshots = seen["snapshots"]
    return [
        (end[2] - start[2], snapshots[start[3]], snapshots[end[3]], int(seed))
        for start, end, seed in zip(marks[::2], marks[1::2], seeds, strict=True)
    ]


class _Sgd:
    """Plain SGD, as the run's ``torch.optim.SGD`` steps (whose first step imports torch's
    compiler: a second per ``treino check``)."""

    def __init__(self, parameters):
        self.parameters = list(parameters)

    @torch.no_grad()
    def step(self):
        for p in self.parameters:
            p.add_(p.grad, alpha=-scenarios.PIPELINE_LR)

    def zero_grad(self):
        for p in self.parameters:
            p.grad = None


def trained(params, start, seed):
    """The parameters after one pass of the training loop over the right batches of ``seed``'s
    items, from ``start``: what the supervisor must have read at the run's end."""
    model = scenarios.pipeline_model()
    torch.nn.utils.vector_to_parameters(vector(start).float(), model.parameters())
    optimizer = _Sgd(model.parameters())
    for batch in expected_batches(params):
        x = torch.tensor([scenarios.ITEM.unpack(scenarios.pipeline_item(seed, i)) for i in batch])
        scenarios.pipeline_step(model, optimizer, x, torch.tensor(batch))
    return flat(model.parameters())


def _right(params, run):
    """Whether a run's parameters ended where the right batches take them."""
    _, start, end, seed = run
    return bool(torch.allclose(vector(end), trained(params, start, seed), atol=ATOL, rtol=RTOL))


def _well_formed(data):
    """The batches (lists of sample indices) and the loader's description (a dict), as the
    harness reports them (``worker/harness/pipeline.py``)."""
    batches, loader = data.get("batches"), data.get("loader")
    return (
        isinstance(batches, list)
        and all(isinstance(b, list) and all(type(i) is int for i in b) for b in batches)
        and isinstance(loader, dict)
    )


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    asked = attempts(params)
    runs = _runs(observed(data), asked)
    agree(data.get("attempts"), asked, "calls")  # as many as the supervisor saw, now
    if not _well_formed(data):
        raise Interfered("shape", detail="the reported batches or loader are not in the harness's shape")
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
    right = all(_right(params, run) for run in runs[1:])
    if right and got != expected:
        raise Interfered(
            "batches", detail="the reported batches are not the ones the parameters were trained on"
        )
    if right:
        data_check = Check("batches", True, "check.batches.passed", values)
    elif got == expected:
        data_check = Check("batches", False, "check.batches.altered", values)
    elif flat_got == flat_expected:
        data_check = Check("batches", False, "check.batches.regrouped", values)
    else:
        data_check = Check("batches", False, "check.batches.failed", values)
    baseline_ms = runs[0][0]
    learner_ms = min(run[0] for run in runs[1:])
    speedup = baseline_ms / max(learner_ms, 1e-3)
    minimum = float(params["min_speedup"])
    timing = {
        "speedup": speedup,
        "baseline": round(baseline_ms),
        "yours": round(learner_ms),
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
        "baseline_ms": round(baseline_ms, 1),
        "learner_ms": round(learner_ms, 1),
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
        parallel = _parallel(observed(data), float(params["item_ms"]))
        if parallel > 1:  # loading did overlap: the time went elsewhere (starting the workers)
            return Diagnosis("slow-start", {**timing, "parallel": parallel})
        return Diagnosis("still-serial", {**timing, "workers": workers})
    return None


def _parallel(seen, item_ms):
    """The most items the supervisor's server had been asked for and not yet answered at once,
    over the learner's runs (each answered ``item_ms`` after it was asked): 1 where the loader
    asked for them one at a time, however many workers it had. The server's own times (the ask
    times it kept), not the child's report."""
    asked = (seen.get("items") or {}).get("asked") or []
    most = 0
    for run in asked[1:]:
        times = sorted(t for t in run if isinstance(t, (int, float)))
        start = 0
        for end, t in enumerate(times):
            while times[start] <= t - item_ms:
                start += 1
            most = max(most, end - start + 1)
    return most


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
