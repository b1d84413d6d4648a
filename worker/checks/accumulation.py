"""Checks of the "accumulation" kind (docs/architecture.md, "The maths behind the diagnosis").

The reference is the true large batch: for every accumulation cycle, one batch made of
its micro-batches, mean loss (or summed token losses over the cycle's tokens), one
backward, clipping if the exercise clips, one SGD step — float64 on the CPU, built from
the same seeded scenario the harness used. The learner passes when the parameters match
it after every optimizer step, the step count is right and at most one micro-batch's
activations were alive at a time. When something differs, ``.grad`` at every step is
decomposed onto the per-micro-batch unit gradients at the parameters the supervisor read, and the
coefficients (expected: each micro-batch's share of its cycle) name the mistake.
"""

import json
import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from contracts.messages import Sci  # noqa: E402
from contracts.verdict import ChartRecord, FactRecord, bar, chart, fact  # noqa: E402
from worker.checks import (  # noqa: E402
    SEEDING,
    Check,
    Evaluation,
    Interfered,
    agree,
    kernel_memory,
    observed,
    snapshots,
    tensors,
)
from worker.checks.accumulation_mistakes import (  # noqa: E402
    diagnose,
    memory_check,
    scaler_check,
    unit_gradient,
)
from worker.checks.accumulation_mistakes import diagnose_error as diagnose_error  # noqa: E402  (the kind's)
from worker.harness import memory, scenarios  # noqa: E402
from worker.harness.protocol import reported, reported_meters  # noqa: E402

# traj_err = max_t |θ_t − θ_ref,t| / |θ_ref,t − θ_0|; wrong loops are ≥ 0.14.
# The tolerance follows the dtype a learner can reasonably bring into the scenario's: in a
# float64 run, a float32 factor (`1 / num_tokens` of an int64 count) is ~1e-7 off, so 1e-5;
# in a float32 run, float32 accumulation order, 1e-4.
TOLERANCES = {"float64": 1e-5, "float32": 1e-4}
# A float32 factor only scales an update; arithmetic done in float32 (a cycle computed on a
# float32 copy of the model: issue 41, half the memory of a float64 cycle) also turns it. Each
# update's direction is compared with the gradient of the large batch at the learner's own
# parameters before it (the sine of the angle between them): float64 arithmetic in any order
# leaves ~1e-15 (measured: right loops at most MEASURED_RIGHT), float32's ~1e-7 (at least
# MEASURED_FLOAT32). The CPU only: on CUDA, the tolerance above stands.
DIRECTION = {"float64": 1e-10}
SAME_START = 1e-13  # an update started where the reference's did: its gradient is the reference's
# what the scenario's own dtype gives a right loop (1e-15 in float64, 1.7e-6 in float32);
# a passing error above it is named as rounding from a lower precision
EXACT = {"float64": 1e-12, "float32": 1e-5}
GPU_FACTOR = 10.0  # nondeterministic kernels on CUDA
# A right trajectory needs every micro-batch's forward with autograd on, which saves at least
# what the reference's forward of that micro-batch saves; a meter that counted less than half
# of it did not see them (saved under hooks of the learner's own, for instance).
HIDDEN = 0.5
# with no optimizer step observed, parameters further than this share of the reference's first
# update from where they began were moved by something else
MOVED = 0.01
MAX_STEPS = 64  # the harness records the first 64 steps
# The run (8 or 11 micro-batches; token-loss 8 of 12,000 sequences), as the kernel counts the
# process over the learner's call: a right loop's peak rises by 1.1-1.4× what one micro-batch
# saves for backward (as the meter counts it: its input and outputs shared by two layers count
# twice; backward's work on top), a loop that holds the whole
# cycle by ~2.5× (token-loss's 30.2, a profiler around it 32.8, the whole cycle 61.4, over 22.0).
# Two micro-batches' graphs alive for one backward take one more hidden activation: on
# micro-batches of 80,000 (27.5 MiB saved) they read 42.3-46.8 MiB where right loops read
# 30.0-38.1, too near for any line (issue 41, red team 4: on a thread, their forwards through
# ``F.linear`` so that no hook counted them, they passed under 1.7×). The exercises of the
# accumulation lesson's scenarios therefore use micro-batches of 160,000 and lines of their own,
# ``params["kernel_factor"]``, measured on their golden banks, bwrap under load:
# - scaler-clipping (the mlp: 55.0 MiB saved) 1.42 (78.0 MiB): right loops 59.4-62.2 MiB (the
#   profiler around the loop 62.2, checkpointed micro-batches 67.0, torch.func 72.7: 5.3 MiB under
#   the line), two micro-batches at a time 82.9-83.3 (4.9 MiB over it);
# - accumulate and remainder (``scenarios.Features``, which allocates a third as much per
#   micro-batch for as much saved: 35.4 MiB) 1.39 (49.2 MiB): right loops 31.4-38.4 MiB (the
#   profiler around the loop 33.7, torch.func 33.3, checkpointed micro-batches 38.4), 43.4 for
#   the model's forward written out with an out-of-place ReLU (5.8 MiB under the line); two
#   micro-batches at a time on a thread 54.7-55.1 (the least: their forwards by hand, in place,
#   the loss by hand; 5.5 MiB over it);
# the whole cycle far above (101).
# KERNEL_FACTOR stands where an exercise names none (token-loss).
KERNEL_FACTOR = 1.7
# What a loop may hold from before its call, counted from the ``watch-memory`` sync (before the
# learner's file is loaded: torch's code is paged in by the harness's warm-up before it): the
# learner's module, what it imports, a profiler's buffers. Read from there, a loop's rise counts
# memory it held into the call and freed in it (a ballast: tens of MiB made at import, freed as
# the call begins, under which a whole cycle's activations fit with little rise from the call's
# start). Measured, the rise from there minus the call's own: right loops 0.5-1.2 MiB, fork and
# exec (torch.profiler around the loop 0.5); a ballast of 40 MiB freed as the call began read 70.
# The line (limit + HELD) sits below a cycle kept whole, whatever the ballast (accumulate 58.7
# against 69, token-loss 49.4 against 61), and leaves right loops 16 MiB or more. A profiler
# recording stacks (``with_stack=True``) holds tens of MiB more before the call and is told so.
HELD = 12 << 20
# Where a line of its own sits less than HELD under two micro-batches at a time, a ballast of the
# difference freed as the call begins would let them through from ``watch-memory`` (red team 8's
# route: accumulate's pairs on a thread under 58 MiB made at import passed, its rise "0 B"); those
# exercises name a smaller allowance, ``params["kernel_held_mib"]``: accumulate and remainder 4
# (pairs 54.7 over 49.2 + 4; right loops hold 0.0-0.5 MiB more from the load),
# scaler-clipping 3 (pairs 82.9 over 78.0 + 3).
# the harness's syncs around the learner's call (worker/harness/accumulation.py)
MEMORY_START, MEMORY_END = "memory-start", "memory-end"


@dataclass(frozen=True)
class Reference:
    cycles: list  # micro-batch indices of each cycle
    weights: list  # per micro-batch: samples or real tokens
    positions: list  # per micro-batch: loss positions, padding included
    initial: torch.Tensor
    trajectory: list  # parameters after each step
    grads: list  # gradient before clipping at each step
    micro_peak: int  # saved bytes of one micro-batch (every one has its shapes)
    cycle_peak: int  # saved bytes of the first cycle taken as one batch (its micro-batches together)
    saved_total: int  # saved bytes of every micro-batch's forward, added up


def _saved(scenario, batches):
    """The meter over one forward and backward of ``batches`` taken as one batch."""
    params = list(scenario.model.parameters())
    with memory.SavedTensorMeter(params) as meter:
        scenario.batch_loss(scenario.model, batches).backward()
    scenario.model.zero_grad()
    return meter


@lru_cache(maxsize=32)
def _reference(key: str) -> Reference:
    params = json.loads(key)
    scenario = scenarios.build(params, torch.float64)
    model, batches = scenario.model, scenario.micro_batches
    weights = list(model.parameters())
    cycles = scenarios.cycles(len(batches), int(params["accum_steps"]))
    # every micro-batch has the first's shapes (token-loss: positions, padding included), so saves
    # as much for backward: metered once (each is 80,000 samples); the naive loop's cycle, taken as
    # one batch, saves as much as its micro-batches together (to a few bytes of loss scalars)
    first = _saved(scenario, [batches[0]])
    cycle_peak = len(cycles[0]) * first.peak
    optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
    initial, trajectory, grads = tensors.flat(weights), [], []
    for cycle in cycles:
        optimizer.zero_grad()
        scenario.batch_loss(model, [batches[i] for i in cycle]).backward()
        grads.append(tensors.flat([w.grad for w in weights]))
        if params.get("max_norm") is not None:
            torch.nn.utils.clip_grad_norm_(weights, float(params["max_norm"]))
        optimizer.step()
        trajectory.append(tensors.flat(weights))
    return Reference(
        cycles=cycles,
        weights=[scenario.weight(y) for _, y in batches],
        positions=[scenario.positions(y) for _, y in batches],
        initial=initial,
        trajectory=trajectory,
        grads=grads,
        micro_peak=first.peak,
        cycle_peak=cycle_peak,
        saved_total=len(batches) * first.packed,
    )


def reference(params: dict) -> Reference:
    """The large-batch reference of ``params`` (cached: it depends on nothing else). Built under
    SEEDING: the builders seed torch's global generator, shared by concurrent grades."""
    with SEEDING:
        return _reference(json.dumps(params, sort_keys=True))


def prepare(params: dict, device: str) -> None:
    reference(params)


def _at_own_start(
    params: dict, steps: list[torch.Tensor], initial: torch.Tensor, ref: Reference | None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each update the supervisor read, the update and the large batch's gradient of its
    cycle, taken at the parameters the update started from. Where the update started from the
    reference's own parameters (to 1e-13 of a step: any right loop in float64 arithmetic), the
    reference's gradient there (``ref.grads``) is that gradient to far below any line; elsewhere
    it is computed (a float32 factor moved them by 1e-8)."""
    scenario = None
    found, before = [], initial
    for t, after in enumerate(
        steps[: len(scenarios.cycles(int(params["n_micro"]), int(params["accum_steps"])))]
    ):
        gradient = None
        if ref is not None and t < len(ref.grads):
            start = ref.initial if t == 0 else ref.trajectory[t - 1]
            travelled = tensors.norm(ref.trajectory[t] - start)
            if tensors.norm(before - start) <= SAME_START * travelled:
                gradient = ref.grads[t]
        if gradient is None:
            if scenario is None:
                with SEEDING:  # built again when needed (its micro-batches are tens of MiB): not kept
                    scenario = scenarios.build(params, torch.float64)
            cycle = scenarios.cycles(len(scenario.micro_batches), int(params["accum_steps"]))[t]
            gradient = unit_gradient(scenario, cycle, before)  # the large batch's, at ``before``
        found.append((after - before, gradient))
        before = after
    return found


def directions(
    params: dict, steps: list[torch.Tensor], initial: torch.Tensor, ref: Reference | None = None
) -> list[float]:
    """For each update the supervisor read, the sine of the angle between it and the large
    batch's gradient of its cycle, taken at the parameters the update started from: an update
    made in float64 (clipped, scaled by a GradScaler, by a schedule or by a float32 factor, or
    not) lies along it to rounding, whatever its size. NaN where either is zero or not finite."""
    found = []
    for update, gradient in _at_own_start(params, steps, initial, ref):
        length, size = tensors.norm(gradient), tensors.norm(update)
        if not (math.isfinite(size) and size > 0 and length > 0):
            found.append(math.nan)
        else:
            along = update @ gradient / length**2 * gradient
            found.append(tensors.norm(update - along) / size)
    return found


def ratios_at_own_start(
    params: dict, steps: list[torch.Tensor], initial: torch.Tensor, ref: Reference | None = None
) -> list[float]:
    """Each update's size over the large batch's update from the same parameters (the learning
    rate times its gradient, clipped to ``max_norm`` where the exercise clips): the factor a
    mistake multiplies every update by, whatever the trajectory did after its first step (on
    micro-batches of 80,000 a loss left unscaled moves far enough in one step that its later
    updates, set against the reference's own, read 3.47×, not 4.00×)."""
    lr, max_norm = float(params["lr"]), params.get("max_norm")
    found = []
    for update, gradient in _at_own_start(params, steps, initial, ref):
        length = tensors.norm(gradient)
        clip = min(1.0, float(max_norm) / (length + 1e-6)) if max_norm else 1.0
        step = lr * length * clip
        found.append(tensors.norm(update) / step if step > 0 else math.nan)
    return found


def tolerance(params: dict, device: str) -> float:
    tol = float(params.get("tolerance", TOLERANCES.get(params.get("dtype", "float64"), 1e-4)))
    return tol * (GPU_FACTOR if device.startswith("cuda") else 1.0)


# ---------------------------------------------------------------- outcome


def observations(data: dict, size: int) -> tuple[list, int, list, dict]:
    """What the supervisor read: the parameters after each step, the number of steps, the final
    parameters and the memory meter's counts (its peak kept by the supervisor). The child's own
    report must say the same, or the run was interfered with. ``size``: how many values the
    scenario's parameters hold."""
    seen = observed(data)
    steps = [s[:size] for s in snapshots(seen, "step")]
    taken = int(seen["counts"].get("step", 0))
    meter = (reported_meters(seen) or [None])[0] or {"peak": 0, "packed": 0}
    final = seen["final_params"][:size]
    told = reported(data, "steps")
    agree(reported(data, "steps_total"), taken, "steps")
    agree(len(told), min(taken, MAX_STEPS), "steps")
    agree([s["params"] for s in told], steps[: len(told)], "parameters")
    agree(reported(data, "final_params"), final, "parameters")
    agree(int(reported(data, "peak_saved_bytes")), meter["peak"], "memory")
    return steps, taken, final, meter


def kernel_check(params: dict, data: dict, ref: Reference) -> Check | None:
    """The run's memory as the kernel counted it (None where the exercise has no such count, or
    on CUDA, where no child is watched): the rise of the process's memory over the learner's
    call, within ``KERNEL_FACTOR`` × what one micro-batch saves for backward, and, counted from
    before the learner's file was loaded (``kernel_memory.since_watch``), within that plus
    ``HELD`` (or the exercise's ``kernel_held_mib``): memory held into the call and freed in it
    is counted too. The same run's
    parameters are compared with the large batch's at every step: there is no other run where a
    loop could behave otherwise."""
    seen = observed(data)
    if not params.get("kernel_memory") or not kernel_memory.watched(seen):
        return None
    rise = kernel_memory.rise(seen, MEMORY_START, MEMORY_END)
    since = kernel_memory.since_watch(seen, MEMORY_END)
    limit = int(float(params.get("kernel_factor", KERNEL_FACTOR)) * ref.micro_peak)
    held = int(float(params["kernel_held_mib"]) * (1 << 20)) if "kernel_held_mib" in params else HELD
    values = {
        "rise": rise,
        "limit": limit,
        "micro_saved": ref.micro_peak,
        "micro": int(params["micro_batch"]),
        "since": since,
        "held": limit + held,
    }
    if rise > limit:
        return Check("memory_kernel", False, "check.memory_kernel.over", values)
    if since > limit + held:
        return Check("memory_kernel", False, "check.memory_kernel.held", values)
    return Check("memory_kernel", True, "check.memory_kernel.within", values)


def _joined(data: dict) -> Check | None:
    """A failing line where the program's own events show fewer backwards than forwards with
    gradients (recomputations left out): each backward then held the graphs of more than one
    micro-batch (two micro-batches at a time on a thread, the meter blind there: 12 forwards and 6
    backwards; the kernel's line fails them too, on micro-batches of 160,000). What the child
    reports may fail a loop, never pass one; a loop that takes its gradients without
    ``backward`` (``torch.func``) counts none and is judged on the rest."""
    events = reported(data, "events")
    # with gradients on, not a recomputation, and reached by a backward (a forward looked at and
    # dropped is not joined to another: red team 8's logged loss with gradients on)
    forwards = sum(
        1 for e in events if e[0] == "F" and e[3:4] != [False] and e[4:5] != [True] and e[5:6] != [False]
    )
    backwards = sum(1 for e in events if e[0] == "B")
    if 0 < backwards < forwards:
        return Check(
            "one-graph-per-backward",
            False,
            "check.one-graph-per-backward.failed",
            {"forwards": forwards, "backwards": backwards},
        )
    return None


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    ref = reference(params)
    seen_steps, taken, seen_final, meter = observations(data, ref.initial.numel())
    steps = [tensors.vector(s) for s in seen_steps]
    expected = len(ref.trajectory)
    final = tensors.vector(seen_final)

    errors, ratios = [], []
    before, ref_before = ref.initial, ref.initial
    for t in range(min(len(steps), expected)):
        travelled = tensors.norm(ref.trajectory[t] - ref.initial)
        errors.append(tensors.norm(steps[t] - ref.trajectory[t]) / travelled)
        ratios.append(tensors.norm(steps[t] - before) / tensors.norm(ref.trajectory[t] - ref_before))
        before, ref_before = steps[t], ref.trajectory[t]
    tol = tolerance(params, device)
    first_bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if first_bad is not None:  # each update against the large batch's from the same parameters
        ratios = ratios_at_own_start(params, steps[:expected], ref.initial, ref)
    final_err = tensors.norm(final - ref.trajectory[-1]) / tensors.norm(ref.trajectory[-1] - ref.initial)

    finite = [r for r in ratios if math.isfinite(r)]
    median = sorted(finite)[len(finite) // 2] if finite else None
    dtype = params.get("dtype", "float64")
    checks = [_steps_check(taken, expected)]
    first_move = tensors.norm(ref.trajectory[0] - ref.initial)
    moved = not tensors.norm(final - ref.initial) <= MOVED * first_move  # NaN moved too
    checks.append(
        _trajectory_check(
            taken,
            expected,
            errors,
            ratios,
            median,
            first_bad,
            final_err,
            tol,
            EXACT.get(dtype, 0.0),
            dtype,
            moved,
        )
    )
    turned = DIRECTION.get(dtype) if not device.startswith("cuda") else None
    if turned is not None and checks[1].passed:
        angles = directions(params, steps[:expected], ref.initial, ref)
        worst = next((t for t, a in enumerate(angles) if not a <= turned), None)
        if worst is not None:
            values = {"step": worst + 1, "error": Sci(angles[worst]), "limit": Sci(turned), "dtype": dtype}
            checks[1] = Check("trajectory", False, "check.trajectory.turned", values)
    if params.get("scaler"):
        checks.append(scaler_check(params, data, expected))
    # torch's checkpoint saves in the meter's place: fewer bytes are seen where every backward
    # recomputed its forward under it
    recomputed = meter.get("recomputed", 0) >= max(reported(data, "backwards"), 1)
    blind = meter["packed"] < HIDDEN * ref.saved_total and not recomputed
    kernel = kernel_check(params, data, ref)
    if kernel is None and checks[1].passed and blind:  # the meter is what memory rests on here
        raise Interfered(
            "hidden",
            {"seen": int(meter["packed"]), "needed": int(ref.saved_total)},
            f"{meter['packed']} bytes saved for backward seen, {ref.saved_total} needed for these parameters",
        )
    # Where the kernel's count grades memory the meter only names the mistake: a meter that did
    # not see the forwards (saved inside a torch.func transform, on a thread of
    # the loop's own) has no figure to show, and its check is left out.
    peak = int(meter["peak"])
    if kernel is None or not blind:
        checks.append(memory_check(params, ref, data, peak))
    if kernel is not None:
        checks.append(kernel)
    joined = _joined(data) if all(c.passed for c in checks) else None  # what no other line saw
    if joined is not None:
        checks.append(joined)

    metrics = {
        "optimizer_steps": taken,
        "reference_optimizer_steps": expected,
        "update_ratio": round(median, 4) if median is not None else None,
        "trajectory_error": _round_sci(max(errors + [final_err])) if errors else None,
        "peak_activation_bytes": None if kernel is not None and blind else peak,
        "reference_peak_activation_bytes": ref.micro_peak,
        "large_batch_peak_activation_bytes": ref.cycle_peak,  # the naive loop, for the page
        "forwards": reported(data, "forwards"),
        "backwards": reported(data, "backwards"),
    }
    metrics |= _figures(taken, peak if kernel is None or not blind else None, expected, median, ref)
    if params.get("max_norm") is not None:
        metrics["clip_calls"] = reported(data, "clips_total")
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(
            params,
            ref,
            data,
            numbers_ok=checks[0].passed and checks[1].passed,
            blind=kernel is not None and blind,
            kernel=kernel,
        )
    return Evaluation(checks, diagnosis, metrics)


MAX_LOSSES = 64


def summarize(params: dict, data: dict) -> dict:
    """What a plain run did (no verdict): steps, memory, and the loss on all the exercise's
    data with the parameters at the start and after each step, computed here, not trusted."""
    seen_steps, taken, _, meter = observations(data, reference(params).initial.numel())
    with SEEDING:
        scenario = scenarios.build(params, torch.float64)
    weights = list(scenario.model.parameters())
    initial = tensors.flat(weights).tolist()
    losses = []
    with torch.no_grad():
        for snapshot in [initial, *seen_steps][:MAX_LOSSES]:
            torch.nn.utils.vector_to_parameters(tensors.vector(snapshot), weights)
            loss = float(scenario.batch_loss(scenario.model, scenario.micro_batches))
            losses.append(round(loss, 6) if math.isfinite(loss) else None)
    return {
        "optimizer_steps": taken,
        "peak_activation_bytes": int(meter["peak"]),
        "forwards": int(reported(data, "forwards")),
        "backwards": int(reported(data, "backwards")),
        "losses": losses,
        **_figures(taken, int(meter["peak"]), losses=losses),
    }


FIGURE = "figure.accumulation"  # the texts of the kind's charts: messages.d/accumulation.yaml


def _figures(
    steps: int,
    peak: int | None,
    expected: int | None = None,
    median: float | None = None,
    ref: Reference | None = None,
    losses: list[float | None] | None = None,
) -> dict[str, list]:
    """What the page draws of a run (``contracts.verdict``'s declared charts and facts): the loss
    after each step (a plain run), the steps and each update's size against the large batch's, the
    peak activation memory against one micro-batch's and the whole large batch's."""
    charts: list[ChartRecord] = []
    facts: list[FactRecord] = []
    if losses:
        first, last, n = losses[0], losses[-1], len(losses) - 1
        said = {"first": first, "last": last, "n": n} if n and first is not None and last is not None else {}
        charts.append(
            chart(
                "losses",
                "fine",
                [bar(f"{FIGURE}.losses.start", "yours", first)]
                + [
                    bar(f"{FIGURE}.losses.after", "yours", v, values={"n": i})
                    for i, v in enumerate(losses)
                    if i
                ],
                f"{FIGURE}.losses",
                scale="lowest",
                summary=[f"{FIGURE}.losses.summary"] if said else [],
                values=said,
            )
        )
    if expected is None:  # a plain run: what it did, with nothing to set it against
        facts.append(fact(f"{FIGURE}.steps.title", steps))
    else:  # a chart only where the steps differ: 3 against 3 is said
        yours, large = (
            (f"{FIGURE}.steps.yours", "yours", steps),
            (f"{FIGURE}.steps.reference", "reference", expected),
        )
        charts.append(
            chart(
                "steps",
                "count",
                [yours, large],
                f"{FIGURE}.steps",
                note=[],
                shown="unequal",
                fact=f"{FIGURE}.steps.same",
            )
        )
    if median is not None:  # 1.00× against 1.00× is said
        bars = [
            (f"{FIGURE}.update.yours", "yours", round(median, 4)),
            (f"{FIGURE}.update.reference", "reference", 1.0),
        ]
        charts.append(
            chart("update", "times", bars, f"{FIGURE}.update", shown="texts", fact=f"{FIGURE}.update.same")
        )
    if peak is not None and ref is None:
        facts.append(fact(f"{FIGURE}.memory.title", peak, "bytes"))
    elif peak is not None and ref is not None:
        micro, whole = ref.micro_peak, ref.cycle_peak
        more = bool(micro) and abs(peak - micro) > 0.001 * max(peak, micro)
        bars = [
            (f"{FIGURE}.memory.yours", "yours", peak),
            (f"{FIGURE}.memory.micro", "reference", micro),
            (f"{FIGURE}.memory.naive", "naive", whole),
        ]
        summary = [f"{FIGURE}.memory.{'more' if more else 'same'}", f"{FIGURE}.memory.whole"]
        values = {"times": peak / micro if micro else 0.0}
        charts.append(
            chart("memory", "bytes", bars, f"{FIGURE}.memory", summary=summary, values=values, shown="differ")
        )
    return {"charts": charts, "facts": facts}


def _round_sci(x: float) -> float | None:
    return float(f"{x:.3e}") if math.isfinite(x) else None


def _steps_check(taken, expected):
    values = {"steps": taken, "reference_steps": expected}
    if taken == expected:
        return Check("steps", True, "check.steps.passed", values)
    return Check("steps", False, "check.steps.failed", values)


def _trajectory_check(
    taken, expected, errors, ratios, median, first_bad, final_err, tol, exact, dtype, moved=False
):
    """``ratios``: each update's size over the large batch's, each side from its own previous
    step; ``median``: their median (the figure the verdict's chart shows); ``moved``: whether the
    final parameters are not the initial ones. Where the parameters leave the path, the text
    quotes the median where it tells a size apart from the large batch's, and else that step's
    own update where its size differs: the median hides a single wrong update, such as a short
    last cycle divided by ``accum_steps`` (0.50× at the last step, 1.00 over the steps)."""
    if taken == 0:
        # the parameters moved all the same: updated by something other than the optimizer
        # handed in (an optimizer of the loop's own, a manual update), which the grader follows
        message = "check.trajectory.moved_without_step" if moved else "check.trajectory.no_steps"
        return Check("trajectory", False, message, {})
    if first_bad is not None:
        values = {"step": first_bad + 1, "error": Sci(errors[first_bad])}
        if median is not None and round(median, 2) != 1.0:  # the chart's figure says the size
            return Check("trajectory", False, "check.trajectory.diverged", {**values, "ratio": Sci(median)})
        own = ratios[first_bad]
        if math.isfinite(own) and round(own, 2) != 1.0:  # the median hides this step's update
            return Check("trajectory", False, "check.trajectory.diverged_step", {**values, "ratio": Sci(own)})
        return Check("trajectory", False, "check.trajectory.diverged_direction", values)  # the size was right
    if taken != expected:
        return Check(
            "trajectory", False, "check.trajectory.count", {"steps": taken, "reference_steps": expected}
        )
    if not final_err <= tol:
        return Check("trajectory", False, "check.trajectory.final", {"error": Sci(final_err)})
    error = max(errors)
    if error > exact:
        return Check(
            "trajectory",
            True,
            "check.trajectory.passed_rounding",
            {"error": Sci(error), "tolerance": Sci(tol), "dtype": dtype, "exact": Sci(exact)},
        )
    return Check("trajectory", True, "check.trajectory.passed", {"error": Sci(error)})
