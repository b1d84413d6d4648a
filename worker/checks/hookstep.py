"""Checks of the "hookstep" kind (lesson 5).

The reference is the plain loop — backward, one Adam step over every parameter, zero_grad — on
the same seeded float64 MLP, here on the CPU. The learner passes when the parameters after every
batch (read by the sandbox's supervisor) equal the reference's, every parameter is stepped once
per backward and inside it (its post-accumulate-grad hook), and at most one parameter's gradient
is alive at any step or between batches.
"""

import json
from dataclasses import dataclass
from functools import lru_cache

import torch

from contracts.messages import Sci
from worker.checks import (
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    Interfered,
    agree,
    kernel_memory,
    observed,
    snapshots,
    tensors,
)
from worker.harness import memory, scenarios
from worker.harness.protocol import reported

# relative parameter error: the hook step is the same Adam arithmetic (0.0 on the CPU); a CUDA
# float64 run may differ in the last bits; a second step or a stale gradient is off by ≥ 1e-3
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}
# The memory run (``memory.wide_scenario``: three layers of 16 MiB of weights), as the kernel
# counts the process: a loop that steps each parameter in its hook and releases its gradient
# rises by 3.0× the parameters' bytes (Adam's two states, one gradient, Adam's temporaries), one
# that holds every gradient by 3.67× (measured: 144 and 176 MiB over 48; 72.2 and 88.3 over 24);
# the line between them. Two batches: in the first Adam makes its state, which alone can hide
# gradients held to the last hook; in the second they show above it (73.0 against 88.9 MiB)
KERNEL_FACTOR = 3.33
# What a right loop may hold from before its memory run, since the supervisor began to watch (as
# the learner's file was loaded; the harness pages torch's code in and gives the wide weights
# pages of the child's own before that): the maths run's leftovers, the learner's module
# (measured: 1-2 MiB; the right loops then read 73.6-75.9 MiB from there, under the limit
# 79.9 + 4). A loop that holds memory into the run and frees it there (a ballast) lowers the rise
# by as much, never this: every gradient alive at once reads 89.5 MiB or more from there
HELD = 4 << 20


@dataclass(frozen=True)
class WideReference:
    biases: torch.Tensor  # after the plain loop's one Adam step
    travelled: float
    param_bytes: int


@dataclass(frozen=True)
class Reference:
    params: list  # after each batch
    n_params: int
    grad_bytes: int


@lru_cache(maxsize=8)
def _reference(key: str) -> Reference:
    params = json.loads(key)
    scenario = scenarios.build(params)
    model = scenario.model
    weights = list(model.parameters())
    optimizer = torch.optim.Adam(weights, lr=float(params["lr"]))
    after = []
    for x, y in scenario.micro_batches:
        scenario.loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        after.append(tensors.flat(weights))
    grad_bytes = sum(p.numel() * p.element_size() for p in weights)
    return Reference(after, len(weights), grad_bytes)


def reference(params: dict) -> Reference:
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True))


@lru_cache(maxsize=4)
def _wide_reference(key: str) -> WideReference | None:
    params = json.loads(key)
    wide = memory.wide_scenario(params)
    if wide is None:
        return None
    model, batches, loss_fn = wide
    weights = list(model.parameters())
    before = tensors.flat(memory.biases(model))
    optimizer = torch.optim.Adam(weights, lr=float(params["lr"]))
    for x, y in batches:
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    after = tensors.flat(memory.biases(model))
    nbytes = sum(p.numel() * p.element_size() for p in weights)
    return WideReference(after, tensors.norm(after - before), nbytes)


def wide_reference(params: dict) -> WideReference | None:
    with SEEDING:
        return _wide_reference(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    reference(params)
    wide_reference(params)


def _final(seen, size):
    """The parameters once the loop returned: read at the end, or as the memory run began."""
    if seen["counts"].get("memory-start"):
        return snapshots(seen, "memory-start")[0][:size]
    return seen["final_params"][:size]


def _trajectory(ref, seen, tol, size):
    """The parameters after each batch, as the supervisor read them, against the reference."""
    before = [b[:size] for b in snapshots(seen, "batch")]
    after = [*before[1:], _final(seen, size)]
    if len(before) != len(ref.params):
        counts = {"batches": len(before), "expected": len(ref.params)}
        return Check("hook-trajectory", False, "check.hook-trajectory.batches", counts)
    errors = [
        tensors.norm(tensors.vector(a).nan_to_num() - r) / tensors.norm(r)
        for a, r in zip(after, ref.params, strict=True)
    ]
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        values = {"batch": bad + 1, "error": Sci(errors[bad])}
        return Check("hook-trajectory", False, "check.hook-trajectory.failed", values)
    return Check("hook-trajectory", True, "check.hook-trajectory.passed", {"error": Sci(max(errors))})


def _per_batch(data, ref):
    """For each batch: how many steps each parameter got with its gradient, how many step calls
    there were in all, and how many came while backward was not running."""
    n = len(ref.params)
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
    size = len(ref.params[0])
    agree(reported(data, "final_params"), _final(seen, size), "parameters")
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    trajectory = _trajectory(ref, seen, tol, size)
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
    one = alive <= 1
    grads = Check(
        "one-gradient",
        one,
        "check.one-gradient.passed" if one else "check.one-gradient.failed",
        {"alive": alive, "params": ref.n_params},
    )
    checks = [trajectory, steps, grads]
    kernel = kernel_check(params, data, device, size)
    if kernel is not None:
        checks.append(kernel)
    metrics = {
        "peak_alive_gradients": alive,
        "reference_peak_alive_gradients": ref.n_params,
        "peak_gradient_bytes": alive_bytes,
        "reference_peak_gradient_bytes": ref.grad_bytes,
        "optimizer_step_calls": sum(calls),
    }
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = _diagnose(ref, calls, outside, alive)
    return Evaluation(checks, diagnosis, metrics)


def kernel_check(params: dict, data: dict, device: str, size: int) -> Check | None:
    """The memory run as the supervisor saw it (None where the exercise has none, or on CUDA,
    where no child is watched): the wide model's biases where the plain loop's Adam step puts
    them, and the rise of the process's memory, as the kernel counted it, within
    ``KERNEL_FACTOR`` × the parameters' bytes from the run's start and, ``HELD`` more, from the
    learner's file's load. The lists the loop's process reported (steps,
    gradients alive) name the mistake; this is what a pass rests on."""
    wide = wide_reference(params)
    seen = observed(data)
    if wide is None or not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    total = size + wide.biases.numel()
    error = kernel_memory.trained(seen, "memory-end", total, size, wide.biases, wide.travelled)
    limit = int(KERNEL_FACTOR * wide.param_bytes)
    values = {"rise": rise, "limit": limit, "params": wide.param_bytes, "width": int(params["memory_width"])}
    values |= {"since": since, "held": limit + HELD}
    if not error <= 1e-6:
        return Check("gradients_kernel", False, "check.gradients_kernel.untrained", values)
    if rise > limit:
        return Check("gradients_kernel", False, "check.gradients_kernel.failed", values)
    if since > limit + HELD:
        return Check("gradients_kernel", False, "check.gradients_kernel.held", values)
    return Check("gradients_kernel", True, "check.gradients_kernel.passed", values)


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
