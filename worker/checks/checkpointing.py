"""Checks of the "checkpointing" kind (lesson 4; docs/architecture.md, "Tolerances").

The reference is the naive step — ``loss_fn(model(x), y).backward()``, one SGD step — on
the same seeded float64 ``BlockNet``, here on the CPU. The learner passes when the gradient
at every step equals the reference's (checkpointing recomputes exactly the same numbers),
the peak of live tensor bytes during each step stays within ``budget`` × the naive step's
(measured the same way: what ``max_memory_allocated`` would see, on any device), and the
gradients are released (``None``) when the step returns. What a pass on memory rests on is the
kernel's count of the process on two memory runs (``kernel_check``: the budget's peak;
``release_check``: what the process still holds once the step returned, on layers wide enough
that their gradients are tens of MiB); the meter's peak and the ``.grad`` the child reported
only name the mistake.
"""

# ruff: noqa: F405  (the kit's names, from worker/checks/kit.py)

import json
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from contracts.messages import Sci  # noqa: E402
from worker.checks import agree  # noqa: E402
from worker.checks.kit import *  # noqa: F403, E402  (worker/checks/kit.py)
from worker.harness import memory, scenarios  # noqa: E402
from worker.harness.checkpointing import Read  # noqa: E402
from worker.harness.hookstep import places  # noqa: E402
from worker.harness.observer import WATCH  # noqa: E402
from worker.harness.protocol import reported, reported_meters

# relative gradient error: checkpointing is bitwise equal on the CPU (0.0); a CUDA float64
# step may differ in the last bits; a detached or unrecorded block is off by ≥ 0.1
TOLERANCE = {"cpu": 1e-9, "cuda": 1e-7}


# the memory run, as the kernel counts the process, may exceed ``budget`` × the naive step's
# peak (the meter's, on the same batch) by this share of it: a right step's rise is within 1 %
# of the meter's figure, the right variants of the golden bank 0.50-0.57× (measured, a batch of
# 40,000: per block 54.2 MiB, whole model at once 98.3, the meter's naive peak 97.7; of 24,000:
# sliced pairs 0.56×, half checkpointed 0.80×)
KERNEL_SLACK = 0.02
# What a right step may hold from before its memory run, since the supervisor began to watch (as
# the learner's file was loaded; the harness pages torch's code in before that): the calls'
# tensors, the learner's module (measured: 5 MiB in the golden bank's right steps, the budget's
# peak then 34-40 MiB from there). A loop that holds memory into the run and frees it there (a
# ballast) lowers the rise by that much, never this: the naive step reads 63-71 MiB from there
# whatever it held, two segments of three blocks 47.7 (their rise 42.6 MiB, 36.7 with a 6 MiB
# ballast: red team 3, #8), the solution 37.9 (the line, at a batch of 24,000: 39.3 + 6 MiB)
HELD = 6 << 20
# The release run (``scenarios.release_params``: the blocks' 18 layers 512 wide, float64, 36 MiB
# of gradients): what the process still holds once the step returned, over what it held as the run
# began. Right steps leave 0.2 MiB, a step that keeps its gradients (zeroed, or in a list of its
# own) all 32; at most this share of the gradients' bytes may stay, and from the load on ``HELD``
# more (right steps 5 MiB)
RELEASED = 0.25


@dataclass(frozen=True)
class Reference:
    grads: list
    peak: int  # naive step, largest over the batches
    size: int  # values the parameters hold


@dataclass(frozen=True)
class MemoryReference:
    params: torch.Tensor  # the fresh model's after the naive step on the large batch
    travelled: float  # how far that step moves them
    peak: int  # the naive step's peak of live tensors there


@lru_cache(maxsize=8)
def _reference(key: str) -> Reference:
    params = json.loads(key)
    model, batches, loss_fn = scenarios.block_net(params)
    weights = list(model.parameters())
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    grads, peak = [], 0
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        with memory.LiveTensorMeter(weights, inputs=(x, y)) as meter:
            loss_fn(model(x), y).backward()
        peak = max(peak, meter.peak)
        grads.append(tensors.flat([w.grad for w in weights]))
        optimizer.step()
    return Reference(grads, peak, sum(w.numel() for w in weights))


def reference(params: dict) -> Reference:
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True))


@lru_cache(maxsize=8)
def _memory_reference(key: str) -> MemoryReference | None:
    sized = scenarios.memory_params(json.loads(key))
    if sized is None:
        return None
    model, [(x, y)], loss_fn = scenarios.block_net(sized)
    weights = list(model.parameters())
    before = tensors.flat(weights)
    with memory.LiveTensorMeter(weights, inputs=(x, y)) as meter:
        loss_fn(model(x), y).backward()
    torch.optim.SGD(weights, lr=float(sized["lr"])).step()
    after = tensors.flat(weights)
    return MemoryReference(after, tensors.norm(after - before), meter.peak)


def memory_reference(params: dict) -> MemoryReference | None:
    with SEEDING:
        return _memory_reference(json.dumps(params, sort_keys=True))


@dataclass(frozen=True)
class ReleaseReference:
    biases: torch.Tensor  # the release run's model's after the naive step
    travelled: float
    grad_bytes: int  # its gradients, all of them
    weights: torch.Tensor  # its weights after the naive step, one after another
    sizes: list[int]  # each weight's values


@lru_cache(maxsize=8)
def _release_reference(key: str) -> ReleaseReference | None:
    sized = scenarios.release_params(json.loads(key))
    if sized is None:
        return None
    model, [(x, y)], loss_fn = scenarios.block_net(sized)
    weights = list(model.parameters())
    biases = [m.bias for m in model.modules() if isinstance(m, torch.nn.Linear)]
    wide = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    before = tensors.flat(biases)
    loss_fn(model(x), y).backward()
    torch.optim.SGD(weights, lr=float(sized["lr"])).step()
    after = tensors.flat(biases)
    grad_bytes = sum(p.numel() * p.element_size() for p in weights)
    moved = torch.cat([w.detach().reshape(-1) for w in wide])
    return ReleaseReference(after, tensors.norm(after - before), grad_bytes, moved, [w.numel() for w in wide])


def release_reference(params: dict) -> ReleaseReference | None:
    with SEEDING:
        return _release_reference(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    reference(params)
    memory_reference(params)
    release_reference(params)


# the step the supervisor saw (parameters before and after a call, over the learning rate)
# against the gradient the learner's process reported: the same numbers, up to float64
# rounding of a difference (~1e-12 relative); anything else was made up
STEP_AGREES = 1e-6


def _observations(params, data, size):
    """Each call's memory peak as the supervisor kept it, and the step it saw over each call:
    the child's report must say the same, or the run was interfered with. ``size``: the values
    the parameters hold (the memory run's model, shared too, comes after them)."""
    seen = observed(data)
    before = [b[:size] for b in snapshots(seen, "call")]
    agree(len(reported(data, "peaks")), len(before), "calls")
    peaks = [(m or {}).get("peak", 0) for m in reported_meters(seen)]
    agree(list(reported(data, "peaks")), peaks + [0] * (len(reported(data, "peaks")) - len(peaks)), "memory")
    final = seen["final_params"][:size]
    if seen["counts"].get("memory-start"):  # the calls' last step, before the memory run
        final = snapshots(seen, "memory-start")[0][:size]
    agree(reported(data, "final_params"), final, "parameters")
    if len(reported(data, "steps")) != len(before):
        return  # not one step per call: the gradient check fails on the count
    after = [*before[1:], final]
    lr = float(params["lr"])
    for step, a, b in zip(reported(data, "steps"), before, after, strict=True):
        grad = tensors.vector(step["grad"]).nan_to_num()
        taken = (tensors.vector(a) - tensors.vector(b)).nan_to_num() / lr
        if tensors.norm(taken - grad) > STEP_AGREES * max(tensors.norm(grad), 1e-12):
            raise Interfered("gradients", detail="the reported gradients differ from the steps observed")


def _parted(params: dict, data: dict, size: int) -> tuple[dict, list | None]:
    """The trace with each of the supervisor's readings cut to the values it read whole
    (``harness.checkpointing.Read``: the calls' parameters, the budget run's, the release run's
    biases), and the rest of its reading at ``memory-release-end`` (the seed of the places it
    read of the release run's weights, and the values there); None where the exercise has no
    release run, or that reading is missing."""
    if release_reference(params) is None:
        return data, None
    seen = observed(data)
    whole = _total(params, size)
    shots = seen.get("snapshots")
    if not isinstance(shots, list) or not all(isinstance(s, list) for s in shots):
        raise Interfered("shape", detail="the supervisor's readings do not have its shape")
    ends = snapshots(seen, "memory-release-end")
    rest = ends[0][whole:] if ends else None
    final = seen.get("final_params")
    cut = {**seen, "snapshots": [s[:whole] for s in shots]}
    if isinstance(final, list):
        cut["final_params"] = final[:whole]
    return {**data, "observed": cut}, rest


def _weights_error(release: ReleaseReference, rest: list | None) -> float:
    """How far the release run's weights the supervisor read after the step (``rest``: the seed of
    the places it drew, then the values there) are from the naive step's, relative to their size
    (infinity where the reading is missing or of another shape). Right steps: 0 on the CPU; a
    step that trained weights of its own leaves the mapping's where they began, ~1e-3 away."""
    if not (rest and isinstance(rest[0], float) and rest[0].is_integer()):
        return math.inf
    own = places(int(rest[0]), release.sizes, Read.SAMPLES)
    offsets = [sum(release.sizes[:i]) for i in range(len(release.sizes))]
    found = torch.cat([p + o for p, o in zip(own, offsets, strict=True)])
    if len(rest) != 1 + found.numel():
        return math.inf
    expected = release.weights[found]
    return tensors.norm(tensors.vector(rest[1:]).nan_to_num() - expected) / tensors.norm(expected)


def weights_read(params: dict, check: Check | None, rest: list | None, tol: float) -> Check | None:
    """The release run's ``check``, where the supervisor read the run's weights after the step,
    in its mapping of the child's hand-off (``rest``: ``harness.checkpointing.Read``), where the
    naive step puts them; else not a pass: a step that did not train them there has no figure
    to go by (red team 4, issue 41: a step that kept its gradients and freed the weights as it
    ended, made in the child's own pages then, left no more in memory than a right one)."""
    release = release_reference(params)
    if check is None or release is None or _weights_error(release, rest) <= tol:
        return check
    return Check("released_kernel", False, "check.released_kernel.untrained", check.values)


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    ref = reference(params)
    data, rest = _parted(params, data, ref.size)
    _observations(params, data, ref.size)
    tol = TOLERANCE["cuda" if device.startswith("cuda") else "cpu"]
    errors = [
        tensors.norm(tensors.vector(s["grad"]) - g) / tensors.norm(g)
        for s, g in zip(reported(data, "steps"), ref.grads, strict=False)
    ]
    expected = len(ref.grads)
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if len(reported(data, "steps")) != expected:
        grads = Check(
            "gradients",
            False,
            "check.gradients.steps",
            {"steps": len(reported(data, "steps")), "expected": expected},
        )
    elif bad is not None:
        mine = tensors.vector(reported(data, "steps")[bad]["grad"]).nan_to_num()
        norm = tensors.norm(mine) / tensors.norm(ref.grads[bad])
        grads = Check(
            "gradients",
            False,
            "check.gradients.failed",
            {"step": bad + 1, "error": Sci(errors[bad]), "ratio": Sci(norm)},
        )
    else:
        grads = Check("gradients", True, "check.gradients.passed", {"error": Sci(max(errors))})
    peak = max(reported(data, "peaks"))
    budget = float(params["budget"])
    values = {"peak": peak, "naive": ref.peak, "ratio": peak / ref.peak, "budget": budget}
    fits = peak <= budget * ref.peak
    mem = Check("peak", fits, "check.peak.passed" if fits else "check.peak.failed", values)
    kept = max(reported(data, "grads_kept"))
    released = Check(
        "released", not kept, "check.released.passed" if not kept else "check.released.failed", {"kept": kept}
    )
    checks = [grads, mem, released]
    kernel = kernel_check(params, data, device, ref.size)
    if kernel is not None:
        checks.insert(2, kernel)
    kept_kernel = weights_read(params, release_check(params, data, device, ref.size), rest, tol)
    if kept_kernel is not None:
        checks.append(kept_kernel)
    metrics = {
        "peak_live_bytes": peak,
        "naive_peak_live_bytes": ref.peak,
        "peak_ratio": round(peak / ref.peak, 3),
        "recomputed_blocks": _recomputed(data),
    }
    # the kernel's figures, where it counted them (what a pass on memory rests on)
    for check, keys in ((kernel, ("rise", "since")), (kept_kernel, ("stayed", "since"))):
        if check is not None:
            metrics.update({f"{check.name}_{key}_bytes": check.values[key] for key in keys})
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(params, ref, data, errors, values)
    return Evaluation(checks, diagnosis, metrics)


def _total(params: dict, size: int) -> int:
    """The values the supervisor reads at a sync: the calls' parameters, the budget run's, the
    release run's biases."""
    mem, release = memory_reference(params), release_reference(params)
    return size + (mem.params.numel() if mem else 0) + (release.biases.numel() if release else 0)


def kernel_check(params: dict, data: dict, device: str, size: int) -> Check | None:
    """The memory run as the supervisor saw it (None where the exercise has none, or on CUDA,
    where no child is watched): its step where the naive one puts the fresh model, read from
    the parameters, and the rise of the process's memory, as the kernel counted it, within the
    budget of the naive step's peak on that batch, from the run's start and, with ``HELD`` more,
    from the learner's file's load. A step that did not train there has no memory figure to go
    by: not a pass."""
    mem = memory_reference(params)
    seen = observed(data)
    if mem is None or not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, "memory-start", "memory-end")
    since = kernel_memory.since_watch(seen, "memory-end")
    error = kernel_memory.trained(seen, "memory-end", _total(params, size), size, mem.params, mem.travelled)
    budget = float(params["budget"])
    limit = int((budget + KERNEL_SLACK) * mem.peak)
    values = {
        "rise": rise,
        "naive": mem.peak,
        "ratio": rise / mem.peak,
        "budget": budget,
        "batch": int(params["memory_batch"]),
        "since": since,
        "held": limit + HELD,
    }
    # as close as the observed step's own gradients must be (float64): a step computed in
    # float32 (half the memory) is ~1e-7 off, and passed at the 1e-6 this allowed before
    if not error <= TOLERANCE["cuda" if device.startswith("cuda") else "cpu"] * 10:
        return Check("peak_kernel", False, "check.peak_kernel.untrained", values)
    if rise > limit:
        return Check("peak_kernel", False, "check.peak_kernel.failed", values)
    if since > limit + HELD:
        return Check("peak_kernel", False, "check.peak_kernel.held", values)
    return Check("peak_kernel", True, "check.peak_kernel.passed", values)


def _stayed(seen: dict, start: str, end: str) -> int:
    """What the child held at the ``end`` sync over what it held at ``start``, as the kernel
    counted it: its resident set, or the job's cgroup's bytes where read and risen more (the
    figures now, not their peaks). Raises ``Interfered`` where either reading is missing."""
    rows = seen.get("memory")
    begun = None
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, list) or len(row) not in (4, 6):
            break
        if row[0] == start:
            begun = row
        elif row[0] == end and begun is not None:
            if begun[2] < 0 or row[2] < 0:
                break
            stayed = row[2] - begun[2]
            if len(row) == 6 and len(begun) == 6 and begun[4] >= 0 and row[4] >= 0:
                stayed = max(stayed, row[4] - begun[4])
            return max(stayed, 0)
    raise Interfered("missing", detail=f"no {start} then {end} in the supervisor's memory readings")


def release_check(params: dict, data: dict, device: str, size: int) -> Check | None:
    """The release run as the supervisor saw it (None where the exercise has none, or on CUDA):
    its biases where the naive step puts them (its weights too: ``weights_read``), and what the
    process still held once the step
    returned, as the kernel counted it, over what it held as the run began (at most
    ``RELEASED`` of the gradients' bytes) and, with ``HELD`` more, over what it held as the
    learner's file was loaded. The ``.grad`` the child reported as None only names the mistake;
    a step that keeps its gradients anywhere keeps their memory, and this counts it."""
    release = release_reference(params)
    seen = observed(data)
    if release is None or not kernel_memory.watched(seen):
        return None
    kernel_memory.rise(seen, "memory-release-start", "memory-release-end")  # the mark not lowered
    stayed = _stayed(seen, "memory-release-start", "memory-release-end")
    since = _stayed(seen, WATCH, "memory-release-end")
    # its weights enter the child's page tables after the budget's run (``harness.checkpointing``'s
    # _touch; the set-up dropped them once drawn): from the file's load on, the process rightly
    # holds them too
    weights = release.grad_bytes - release.biases.numel() * release.biases.element_size()
    at = _total(params, size) - release.biases.numel()
    error = kernel_memory.trained(
        seen, "memory-release-end", _total(params, size), at, release.biases, release.travelled
    )
    limit = int(RELEASED * release.grad_bytes)
    values = {
        "stayed": stayed,
        "limit": limit,
        "grads": release.grad_bytes,
        "width": int(params["memory_release_width"]),
        "since": since,
        "held": limit + HELD + weights,
    }
    if not error <= TOLERANCE["cuda" if device.startswith("cuda") else "cpu"] * 1e3:
        return Check("released_kernel", False, "check.released_kernel.untrained", values)
    if stayed > limit:
        return Check("released_kernel", False, "check.released_kernel.failed", values)
    if since > limit + HELD + weights:
        return Check("released_kernel", False, "check.released_kernel.held", values)
    return Check("released_kernel", True, "check.released_kernel.passed", values)


def _recomputed(data):
    return len({e[1] for e in reported(data, "events") if e[0] == "F" and e[2]})


def _longest_recompute(data):
    """The most block forwards that ran back to back during a backward: one recomputation."""
    longest = run = 0
    for e in reported(data, "events"):
        run = run + 1 if e[0] == "F" and e[2] else 0
        longest = max(longest, run)
    return longest


def diagnose(params, ref, data, errors, values):
    """The known mistake the trace shows, or None."""
    tol = 1e-6
    if len(reported(data, "steps")) != len(ref.grads):
        return None
    if any(not e <= tol for e in errors):
        # named only when the graph was cut: some blocks got no gradient at all
        t = next(t for t, e in enumerate(errors) if not e <= tol)
        mine = tensors.vector(reported(data, "steps")[t]["grad"]).nan_to_num()
        summed = sum(ref.grads[: t + 1][1:], ref.grads[0])
        if t and tensors.norm(mine - summed) <= tol * tensors.norm(summed):
            # every step before it was right: the earlier gradients were still there, added to
            return Diagnosis(
                "grads-accumulated",
                {
                    "step": t + 1,
                    "kept": max(reported(data, "grads_kept")),
                    "bytes": reported(data, "grad_bytes"),
                },
            )
        without = reported(data, "blocks") - len({e[1] for e in reported(data, "events") if e[0] == "G"})
        if not without:
            return None
        return Diagnosis(
            "gradients-changed",
            {"step": t + 1, "error": Sci(errors[t]), "without": without, "blocks": reported(data, "blocks")},
        )
    blocks, kept = reported(data, "blocks"), max(reported(data, "grads_kept"))
    kept_values = {**values, "kept": kept, "bytes": reported(data, "grad_bytes")}
    if values["ratio"] > values["budget"]:
        if _longest_recompute(data) == blocks:
            return Diagnosis("checkpoint-everything-at-once", {**values, "blocks": blocks})
        if kept and _recomputed(data) == blocks:  # checkpointed, but last step's grads linger
            return Diagnosis("grads-kept", kept_values)
        if _recomputed(data) < blocks:  # some blocks kept every activation until backward
            return Diagnosis("over-budget", {**values, "recomputed": _recomputed(data), "blocks": blocks})
        return None
    if kept:
        return Diagnosis("grads-kept", kept_values)
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    """A known mistake behind an exception."""
    if "does not require grad" in error.get("message", ""):
        frames = error.get("traceback") or []
        return Diagnosis("no-grad-forward", {"code": frames[-1]["code"] if frames else ""})
    return None
