"""Checks of the "hookstep" kind (lesson 5).

The reference is the plain loop — backward, one Adam step over every parameter, zero_grad — on
the run's model (the wide model of ``harness.wide_scenario`` where the exercise has a memory run,
else the seeded float64 MLP), here on the CPU. The learner's loop runs once (issue 41: a program
that could tell a small maths run from the wide memory run was wrong only where memory was not
counted). It passes when the parameters after every batch, as the sandbox's supervisor read them
(``harness.hookstep.Sampled``: the biases whole and each weight at places it drew after the fork)
as the next backward through the model began and at the end, equal the reference's (red team 6:
read as each batch was fetched, a right loop that fetched ahead was read a batch early), and,
with a memory run, the kernel's count of the process's memory held Adam's state and one gradient
at a time. The steps and gradients the loop's process reported
(every parameter stepped once per backward and inside it, at most one gradient alive) only name
the mistake, or fail the loop.
"""

# ruff: noqa: F405  (the kit's names, from worker/checks/kit.py)

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from contracts.messages import Sci
from contracts.verdict import chart, fact
from worker.checks.kit import *  # noqa: F403  (worker/checks/kit.py)
from worker.harness import hookstep as harness
from worker.harness.protocol import reported

# relative parameter error: the hook step is the same Adam arithmetic (0.0 on the CPU; a fused
# Adam's own kernel 1.1e-15, 2.0e-15 over every place); a CUDA float64 run may differ in the last
# bits; a second step or a stale gradient is off by ≥ 1e-3. Every gradient kept alive as a copy of
# lower precision, stepped from it upcast, is off by what its rounding does to Adam's second step:
# a float32 copy 2.1e-9 (within 1e-9 a factor 2 away, and its memory, 65.0 MiB under a fused Adam,
# under the line), a bfloat16 one 4e-6 (63 MiB), rounded to m significant bits ≈ 1.4e-9 × 2^(24-m)
# where only the second batch's are. Within 1e-13 a copy keeps ≥ 38 of float64's 53 bits and a
# sign and an exponent (≥ 5.6 bytes of 8): 11 of them on top of a fused Adam's 53.7 MiB are ≥ 69,
# over the line (``tests/sandbox/test_step_in_backward_low_precision_copies.py``)
TOLERANCE = {"cpu": 1e-13, "cuda": 1e-7}
# The memory run (``harness.wide_scenario``: twelve layers of 2 MiB of weights, 24 MiB in all),
# as the kernel counts the process: a loop that steps each parameter in its hook and releases its
# gradient rises by Adam's two states, one gradient and Adam's temporaries (solution 57.6 MiB,
# 2.40× the parameters' bytes; foreach 55.2, fused 53.7); one that holds every gradient by all of
# them on top (the plain loop 79.3; every gradient alive under a fused Adam, which makes no
# temporaries, 75.2-76.0: 3.13×); the line between them. Of three layers 8 MiB each (before red
# team 4, issue 41) the line was 3.33×, and every gradient alive under a fused Adam read 74.6 MiB
# against the solution's 74.5: a layer's gradient and Adam's temporaries were the same size.
# Two batches: in the first Adam makes its state, which alone can hide gradients held to the last
# hook; in the second they show above it. Red team F3/F6 (torch's profiler paged in by the harness
# before the watch): solution 56.1, fused 51.9; profiled right loops 60.5-61.4 (the events and
# summary they keep); four gradients kept in a deque 60.1, between them: the line cannot refuse it
KERNEL_FACTOR = 2.75
# What a right loop may hold from before its run, since the supervisor began to watch (as the
# learner's file was loaded; the harness pages torch's code in before that): the learner's module
# (measured: 1-2 MiB). A loop that holds memory into the run and frees it there (a ballast) lowers
# the rise by as much, never this: every gradient alive at once reads 75 MiB or more from there,
# over the limit 66.1 + 4
HELD = 4 << 20


@dataclass(frozen=True)
class Reference:
    params: list[torch.Tensor]  # every parameter flattened, one after another: at the start, after each batch
    sizes: list[int]  # each parameter's values
    n_params: int
    grad_bytes: int
    wide: bool  # the memory run's model: the kernel's figures grade it


@lru_cache(maxsize=2)
def _reference(key: str) -> Reference:
    params = json.loads(key)
    model, batches, loss_fn, wide = harness.the_run(params, "cpu")
    weights = list(model.parameters())
    optimizer = torch.optim.Adam(weights, lr=float(params["lr"]))
    after = [tensors.flat(weights)]
    for x, y in batches:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(weights))
    grad_bytes = sum(p.numel() * p.element_size() for p in weights)
    return Reference(after, [p.numel() for p in weights], len(weights), grad_bytes, wide)


def reference(params: dict) -> Reference:
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    reference(params)


def _read(shot: object, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """A snapshot of ``Sampled``: the places it read (into the parameters flattened one after
    another), rebuilt from its seed, and the values there. The supervisor's own reading; one of
    another shape was not made by it."""
    if not (isinstance(shot, list) and shot and isinstance(shot[0], float) and shot[0].is_integer()):
        raise Interfered("shape", detail="a snapshot of the parameters does not have the supervisor's shape")
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    own = harness.places(int(shot[0]), sizes)
    found = torch.cat([p + o for p, o in zip(own, offsets, strict=True)])
    if len(shot) != 1 + found.numel():
        raise Interfered("shape", detail="a snapshot of the parameters does not have the supervisor's shape")
    return found, tensors.vector(shot[1:])


def _end_label(seen: dict) -> str | None:
    return "memory-end" if seen["counts"].get("memory-end") else None


def _trajectory(ref: Reference, seen: dict, tol: float) -> tuple[Check, float]:
    """The parameters after each batch, as the supervisor read them, against the reference;
    and the error of the last (infinity where they could not be read). Read as each backward
    began (what every step before it made; the first, the start) and at the end: a batch is a
    backward, whatever order the loop fetched its batches in."""
    before = snapshots(seen, "backward")
    end = _end_label(seen)
    last = snapshots(seen, end)[:1] if end is not None else [seen.get("final_params")]
    after = [*before[1:], *last]
    if len(before) != len(ref.params) - 1:
        counts = {"backwards": len(before), "expected": len(ref.params) - 1}
        return Check("hook-trajectory", False, "check.hook-trajectory.backwards", counts), math.inf
    errors = []
    for shot, r in zip(after, ref.params[1:], strict=True):
        places, values = _read(shot, ref.sizes)
        expected = r[places]
        errors.append(tensors.norm(values.nan_to_num() - expected) / tensors.norm(expected))
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values_ = {"batch": bad + 1, "error": Sci(errors[bad])}
        return Check("hook-trajectory", False, "check.hook-trajectory.failed", values_), errors[-1]
    passed = Check("hook-trajectory", True, "check.hook-trajectory.passed", {"error": Sci(max(errors))})
    return passed, errors[-1]


def _per_batch(data, ref):
    """For each batch (a backward: the steps in it, and those after it before the next began):
    how many steps each parameter got with its gradient, how many step calls there were in all,
    and how many came while backward was not running."""
    n = len(ref.params) - 1  # the start, then after each batch
    stepped = [[0] * ref.n_params for _ in range(n)]
    calls, outside = [0] * n, [0] * n
    for batch, backward, owned, _alive, _bytes in reported(data, "steps"):
        if not 0 <= batch < n:
            continue
        calls[batch] += 1
        outside[batch] += not backward
        for i in owned:
            if 0 <= i < ref.n_params:
                stepped[batch][i] += 1
    return stepped, calls, outside


def _ints(values: object) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def _well_formed(data: dict) -> None:
    """What the child reported has the harness's shape, or the run was tampered with."""
    steps, between = reported(data, "steps"), reported(data, "between")
    ok = isinstance(steps, list) and _ints(between)
    for step in steps if ok and isinstance(steps, list) else []:
        ok = ok and isinstance(step, list) and len(step) == 5 and type(step[1]) is bool
        ok = ok and _ints([step[0], step[3], step[4]]) and _ints(step[2])
    if not ok:
        raise Interfered("shape", detail="the reported steps do not have the harness's shape")


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    ref = reference(params)
    seen = observed(data)
    _well_formed(data)
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    trajectory, last_error = _trajectory(ref, seen, tol)
    stepped, calls, outside = _per_batch(data, ref)
    once = all(all(c == 1 for c in row) for row in stepped) and calls == [ref.n_params] * len(calls)
    in_backward = not any(outside)
    steps_ok = once and in_backward
    steps = Check(
        "hook-steps",
        steps_ok,
        "check.hook-steps.passed" if steps_ok else "check.hook-steps.failed",
        {"calls": max(calls, default=0), "params": ref.n_params, "outside": sum(outside)},
    )
    alive = max([s[3] for s in reported(data, "steps")] + list(reported(data, "between")) + [0])
    alive_bytes = max([s[4] for s in reported(data, "steps")] + [0])
    kernel = kernel_check(params, data, device, last_error <= tol, alive)
    checks = [trajectory, steps, _released(alive, ref, kernel)]
    if kernel is not None:
        checks.append(kernel)
    metrics = {
        "peak_alive_gradients": alive,
        "reference_peak_alive_gradients": ref.n_params,
        "peak_gradient_bytes": alive_bytes,
        "reference_peak_gradient_bytes": ref.grad_bytes,
        "optimizer_step_calls": sum(calls),
    }
    metrics |= _figures(alive, alive_bytes, ref, sum(calls))
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = _diagnose(ref, calls, outside, alive)
    return Evaluation(checks, diagnosis, metrics)


FIGURE = "figure.hookstep"  # the texts of the kind's charts: messages.d/hookstep.yaml


def _figures(alive: int, alive_bytes: int, ref: Reference, calls: int) -> dict[str, list]:
    """What the page draws (``contracts.verdict``'s declared charts): the gradients alive at once
    and their bytes against the plain loop's, which holds them all until its step (always drawn: a
    loop that holds as many is the lesson's point too), and the optimizer's step calls."""
    fewer = f"{FIGURE}.alive.{'fewer' if alive < ref.n_params else 'as-many'}"
    counted = [(f"{FIGURE}.alive.yours", "yours", alive), (f"{FIGURE}.alive.plain", "naive", ref.n_params)]
    sized = [
        (f"{FIGURE}.gradients.yours", "yours", alive_bytes),
        (f"{FIGURE}.gradients.plain", "naive", ref.grad_bytes),
    ]
    values = {"size": alive_bytes, "all_size": ref.grad_bytes}
    charts = [
        chart("gradients-alive", "count", counted, f"{FIGURE}.alive", summary=fewer, values=values),
        chart("gradients", "bytes", sized, f"{FIGURE}.gradients"),
    ]
    return {"charts": charts, "facts": [fact("fact.hookstep.step-calls", calls)]}


def _released(alive: int, ref: Reference, kernel: Check | None) -> Check:
    """Whether each gradient left ``.grad`` after its step. The count of ``.grad`` set (the loop's
    process reported it) fails the line or names the mistake; a gradient kept anywhere else (a
    list, a deque: red team F6) shows only in the memory the kernel counted, so where it counted,
    the line passes on that figure too, and its text says what was seen, never "one gradient
    alive": four gradients kept in a deque rise within the line (60-62 MiB against 66.1)."""
    values: dict[str, Any] = {"alive": alive, "params": ref.n_params}
    if alive > 1:
        return Check(RELEASED, False, "check.one-gradient.failed", values)
    if kernel is None:  # no memory run, or on CUDA: the process's count alone
        return Check(RELEASED, True, "check.gradient-released.passed", values)
    values |= {k: kernel.values[k] for k in ("rise", "limit")}
    if kernel.passed:
        return Check(RELEASED, True, "check.gradient-released.run_passed", values)
    if kernel.message == "check.gradients_kernel.run_untrained":
        return Check(RELEASED, False, "check.gradient-released.run_unjudged", values)
    return Check(RELEASED, False, "check.gradient-released.run_over", values)


RELEASED = "gradient-released"


def kernel_check(params: dict, data: dict, device: str, trained: bool, alive: int = 0) -> Check | None:
    """The run's memory as the kernel counted the process (None where the exercise has no memory
    run, or on CUDA, where no child is watched): its rise within ``KERNEL_FACTOR`` × the
    parameters' bytes from the run's start and, ``HELD`` more, from the learner's file's load,
    once the parameters the supervisor read ended where the plain loop's puts them
    (``trained``): a run that did not train as asked has no memory figure to go by. The lists
    the loop's process reported (steps, gradients alive) name the mistake; this is what a pass
    rests on."""
    ref = reference(params)
    seen = observed(data)
    if not ref.wide or not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    limit = int(KERNEL_FACTOR * ref.grad_bytes)
    values = {"rise": rise, "limit": limit, "params": ref.grad_bytes, "width": int(params["memory_width"])}
    values["layers"] = int(params.get("memory_layers") or 3)
    values |= {"since": since, "held": limit + HELD}
    if not trained:
        return Check("gradients_kernel", False, "check.gradients_kernel.run_untrained", values)
    if rise > limit:
        return Check("gradients_kernel", False, _over("run", alive, data), values | {"over": rise - limit})
    if since > limit + HELD:
        over = since - limit - HELD
        return Check("gradients_kernel", False, _over("held", alive, data), values | {"over": over})
    return Check("gradients_kernel", True, "check.gradients_kernel.run_passed", values)


def _over(line: str, alive: int, data: dict) -> str:
    """The text of a memory line crossed (red team F3). The kernel counts the process: gradients
    kept alive and anything else it held (a profiler's events and their summary, ~10 MiB in the
    solution's run) read the same, so the text says which only where the loop's process showed it:
    ``.grad`` set on more than one parameter at once (it fails its own line besides), or torch's
    profiler recording (reported: it chooses the text, never a pass). Else it names both."""
    if alive > 1:
        return "check.gradients_kernel." + ("run_failed" if line == "run" else "run_held")
    if reported(data, "profiler") is True:
        return f"check.gradients_kernel.{line}_profiled"
    return f"check.gradients_kernel.{line}_over"


def _diagnose(ref, calls, outside, alive):
    """The known mistake the trace shows, or None."""
    if any(outside):
        return Diagnosis("step-after-backward", {"outside": sum(outside), "batches": len(calls)})
    if len(calls) > 1 and calls[-1] > calls[0] and calls[0] == ref.n_params:
        return Diagnosis(
            "hooks-registered-every-step", {"first": calls[0], "last": calls[-1], "batches": len(calls)}
        )
    if alive > 1 and all(c == ref.n_params for c in calls):
        return Diagnosis("grads-not-released", {"alive": alive, "params": ref.n_params})
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
