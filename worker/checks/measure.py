"""Checks of the "measure" kind (lesson 4, "measure it on your card").

The harness ran the learner's ``train`` in five configurations on the worker's device and
measured each (time per optimizer step, samples per second, peak memory); this module shows
them, one check line per configuration, and judges what the numbers must show whatever the
device: every configuration ran its steps; autocast was on exactly where asked; the
accumulation configuration matches the large batch (the "accumulation" kind's reference
and tolerance, on its own float64 scenario); checkpointing lowered the peak.

Autocast where asked rests on each configuration's parameters as the supervisor read them when
its first timed run ended (the ``config-end`` sync), against float32's and autocast's arithmetic
recomputed here from the same model and batches (issue 41: the dtypes the probe in the learner's
process records were rewritten through its hooks, and passed), and on each memory run's, against
the same arithmetic on its large batch. Checkpointing rests on the memory runs of the
checkpointed configurations ("checkpoint", "all"), as the kernel counted them. The probe's
dtypes, weights and recomputations only name the mistake, or fail the loop (a block before the
last never recomputed in a checkpointed configuration: the kernel cannot tell every other block
checkpointed from every block within the lines' margins, nor the last block at all).
"""

import copy
import json
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from contracts.messages import Phrase, Sci
from contracts.verdict import BarRecord, ChartRecord, bar, chart, clear_winner
from worker.checks import (
    SEEDING,
    Check,
    Diagnosis,
    Evaluation,
    Interfered,
    accumulation,
    agree,
    kernel_memory,
    observed,
    snapshots,
    tensors,
)
from worker.harness import memory, scenarios
from worker.harness.measure import MEMORY_RUNS, micro_batches, read_of
from worker.harness.protocol import reported, reported_meters

CONFIGS = ("fp32", "low", "accum", "checkpoint", "all")
LOW = {"low", "all"}
MAX_STEP_TIMES = 256  # the harness's cap, per configuration
# The memory runs (the harness's ``MEMORY_RUNS``: low precision, then checkpointing, each once
# more on one large batch), as the kernel counts the process, against the naive float32 step's
# peak of live tensors on that batch (68 MiB at 80,000): autocast to bfloat16 rises by 0.58-0.62×
# of it, checkpointing each block by 0.57-0.65× (the high-water mark only rises: read after the
# low-precision run, its figure is the larger of the two), a run that kept float32 or every
# activation by 1.0× (measured on the golden bank). Low precision must stay within LOW_FACTOR;
# checkpointing within ``peak_drop`` (0.8).
LOW_FACTOR = 0.8
# The run of low precision and checkpointing at once ("all"), the first of the memory runs (so
# that no run before it raised the high-water mark): both save, the solution reads 0.32× (21.6
# MiB); either alone 0.54-0.65× (bfloat16 without checkpointing 0.58×, 39.9 MiB). The line
# between them leaves each side about 9 MiB (issue 41, red team 4: "all" rested on the probe's
# flag, which a program set through ``gc`` while it never checkpointed there).
ALL_FACTOR = 0.45
# What a right loop may hold from before its memory runs, since the supervisor began to watch (as
# the learner's file was loaded; the harness pages torch's code in before that, at the
# configurations' sizes): the configurations' leftovers, the learner's module (measured: 5-9 MiB;
# from there the right loops' runs read 46-55 MiB, the limit 54.6 + 10). A loop that holds memory
# into a memory run and frees it there (a ballast) lowers that run's rise by as much, never this:
# a run in float32 reads 74-80 MiB from there whatever it held. Each run is bounded so, the
# checkpointed one too, whose figure from there holds the low-precision run's peak: a right loop's
# is under both limits anyway.
HELD = 10 << 20
# how far a memory run's one step may land from its precision's step, recomputed here (relative to
# the float32 step's travel): a low-precision run from autocast's (bfloat16: right loops 0, float32
# lands 2.0e-2 away), which must also be at least LOW_FLOOR from float32's and nearer autocast's
# than float32's (issue 41, red team 4: a float32 run with every block checkpointed passed the
# low-precision run's memory, its tolerance from the float32 step 0.1); a float32 run from the
# float32 step (recomputation in float32 is exact: right loops 0; bfloat16 2.0e-2). Further, the
# run did not train there, or not in its precision.
MEMORY_TRAINED = {"low": 0.1, "checkpoint": 1e-4}


# The configurations' parameters after their 4 steps (those the supervisor reads: the first layer
# and the head), against float32 arithmetic recomputed here on the same model and batches,
# relative to how far that run moved them (measured on the CPU): right float32 loops land 0 to
# 1.6e-7 away (accumulation's sums); autocast to bfloat16 lands 3.2-3.6e-3 away, and float16
# 1.6e-4. A float32 configuration must land within F32_TOLERANCE; a low-precision one at least
# LOW_FLOOR away, and nearer autocast's own arithmetic (recomputed the same way: 0 for right loops,
# with or without checkpointing or the loss divided outside autocast; the head left in float32 is
# nearer float32, 1.4e-3 against 2.6e-3) than float32's.
F32_TOLERANCE = 1e-5
CUDA_F32_TOLERANCE = 1e-4
LOW_FLOOR = 1e-3


@dataclass(frozen=True)
class ConfigReference:  # of the parameters the supervisor reads (``harness.measure.read_of``)
    initial: torch.Tensor
    float32: dict[int, torch.Tensor]  # accum_steps → the parameters after the run, float32
    low: dict[int, torch.Tensor]  # the same under autocast to bfloat16


@lru_cache(maxsize=4)
def _config_reference(key: str) -> ConfigReference:
    params = json.loads(key)
    base, batches, loss_fn = scenarios.block_net(params, torch.float32)
    lr, k = float(params["lr"]), int(params["accum_steps"])

    def trained(low: bool, accum: int) -> torch.Tensor:
        model = copy.deepcopy(base)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        for i, (x, y) in enumerate(micro_batches(batches, accum), start=1):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
                loss = loss_fn(model(x), y)
            (loss / accum).backward()
            if i % accum == 0:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        return tensors.flat(read_of(model))

    return ConfigReference(
        tensors.flat(read_of(base)),
        {a: trained(False, a) for a in (1, k)},
        {a: trained(True, a) for a in (1, k)},
    )


def config_reference(params: dict) -> ConfigReference:
    with SEEDING:
        return _config_reference(json.dumps(params, sort_keys=True))


@dataclass(frozen=True)
class MemoryReference:
    params: torch.Tensor  # the fresh model's after one float32 step on the large batch
    initial: torch.Tensor
    peak: int  # that step's peak of live tensors
    low: torch.Tensor  # the same step under autocast to bfloat16 (checkpointed or not: the same)


@lru_cache(maxsize=4)
def _memory_reference(key: str) -> MemoryReference | None:
    sized = scenarios.memory_params(json.loads(key))
    if sized is None:
        return None
    model, [(x, y)], loss_fn = scenarios.block_net(sized, torch.float32)
    weights = list(model.parameters())
    initial = tensors.flat(weights)
    lowered = copy.deepcopy(model)
    with memory.LiveTensorMeter(weights, inputs=(x, y)) as meter:
        loss_fn(model(x), y).backward()
    torch.optim.SGD(weights, lr=float(sized["lr"])).step()
    low_weights = list(lowered.parameters())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(lowered(x), y)
    loss.backward()
    torch.optim.SGD(low_weights, lr=float(sized["lr"])).step()
    return MemoryReference(tensors.flat(weights), initial, meter.peak, tensors.flat(low_weights))


def memory_reference(params: dict) -> MemoryReference | None:
    with SEEDING:
        return _memory_reference(json.dumps(params, sort_keys=True))


def step_times(config: dict) -> tuple[float, float, float, int]:
    """A configuration's time per optimizer step in ms: the median of its timed steps and the
    middle half of them (first and third quartiles), and how many steps were timed. A trace
    without step times (recorded before they were) gives its one run's mean, with no spread."""
    times = sorted(config.get("step_ms") or [])
    if not times:
        mean = config["seconds"] * 1000 / max(config["steps"], 1)
        return mean, mean, mean, 0
    if len(times) == 1:
        return times[0], times[0], times[0], 1
    low, median, high = statistics.quantiles(times, n=4, method="inclusive")
    return median, low, high, len(times)


def prepare(params: dict, device: str) -> None:
    accumulation.reference(params["reference"])
    memory_reference(params)
    config_reference(params)


def _size(params: dict) -> int:
    """The values the correctness run's parameters hold (the memory runs' come after them)."""
    return int(accumulation.reference(params["reference"]).initial.numel())


def _total(params: dict) -> int:
    """The values of every snapshot: the correctness run's parameters, the memory runs', then
    each configuration's (the harness shares them in that order)."""
    mem = memory_reference(params)
    per_config = config_reference(params).initial.numel()
    return _size(params) + (len(MEMORY_RUNS) * mem.params.numel() if mem else 0) + len(CONFIGS) * per_config


def _config_params(params: dict, seen: dict) -> dict[int, torch.Tensor]:
    """Each configuration's parameters as the supervisor read them at its ``config-end`` sync."""
    mem = memory_reference(params)
    m = config_reference(params).initial.numel()
    start = _size(params) + (len(MEMORY_RUNS) * mem.params.numel() if mem else 0)
    total = _total(params)
    found = {}
    for label, number, _ms, shot in seen["events"]:
        if label == "config-end" and shot >= 0 and 0 <= number < len(CONFIGS):
            values = seen["snapshots"][shot]
            if len(values) != total:
                raise Interfered("shape", detail="a snapshot of the parameters is not the shared ones")
            at = start + number * m
            found[number] = tensors.vector(values[at : at + m]).nan_to_num()
    return found


def _observed_precision(params: dict, data: dict, device: str) -> Check | None:
    """Each configuration's parameters, read by the supervisor as its first timed run ended,
    against float32's and autocast's arithmetic recomputed here (on the CPU): None where every
    one landed where its precision puts it, else the failed line. What the precision check's
    pass rests on. On CUDA the learner's code runs in the supervisor's own process (issue 42:
    nothing there is observed apart from it), a GPU's float32 may differ from the CPU's in the
    last bits and its bfloat16 products are rounded from sums made in another order: a float32
    configuration must land within ``CUDA_F32_TOLERANCE`` and a low-precision one
    ``LOW_FLOOR`` away from float32, with no comparison to the CPU's bfloat16; and a trace
    recorded there before these readings (none at all) is judged on the dtypes alone."""
    seen = observed(data)
    ref = config_reference(params)
    found = _config_params(params, seen)
    cuda = device.startswith("cuda")
    if not found and seen.get("mode") == "inline":
        return None
    low, k = reported(data, "low_precision"), int(params["accum_steps"])
    tolerance = CUDA_F32_TOLERANCE if cuda else F32_TOLERANCE
    for number, name in enumerate(CONFIGS):
        if number not in found:
            raise Interfered("missing", detail=f"the supervisor did not read the parameters of {name}")
        accum = k if name in ("accum", "all") else 1
        float32, lowered = ref.float32[accum], ref.low[accum]
        travel = tensors.norm(float32 - ref.initial)
        error = tensors.norm(found[number] - float32) / travel
        low_error = tensors.norm(found[number] - lowered) / travel
        values = {"config": Phrase(f"check.measure_{name}.name"), "error": Sci(error), "low": low}
        if name not in LOW and not error <= tolerance:
            values["tolerance"] = Sci(tolerance)
            return Check("measure_precision", False, "check.measure_precision.observed_float32", values)
        if name in LOW and not (error >= LOW_FLOOR and (cuda or low_error < error)):
            values["low_error"] = Sci(low_error)
            return Check("measure_precision", False, "check.measure_precision.observed_low", values)
    return None


def _kernel(params, data, device):
    """The memory runs as the supervisor saw them, one check line each (none where the exercise
    has none, or on CUDA, where no child is watched): each run's one step where its precision's
    step puts its model, read from the parameters (a low-precision run nearer autocast's
    arithmetic than float32's, and at least ``LOW_FLOOR`` from float32's), and the rise of the
    process's memory, as the kernel counted it, within its share of the naive float32 step's
    peak on that batch. The dtypes and recomputations the loop's process reported only name the
    mistake; this is what a pass on them rests on."""
    mem = memory_reference(params)
    seen = observed(data)
    if mem is None or not kernel_memory.watched(seen):
        return []
    size, n = _size(params), mem.params.numel()
    travelled = tensors.norm(mem.params - mem.initial)
    limits = {"all": ALL_FACTOR, "low": LOW_FACTOR, "checkpoint": float(params["peak_drop"])}
    checks = []
    for number, (name, low_on, _checkpointed) in enumerate(MEMORY_RUNS):
        rise = kernel_memory.rise(seen, f"memory-{name}-start", f"memory-{name}-end")
        since = kernel_memory.since_watch(seen, f"memory-{name}-end")
        limit = limits[name]
        at, total = size + number * n, _total(params)
        error = kernel_memory.trained(seen, f"memory-{name}-end", total, at, mem.params, travelled)
        held = int(limit * mem.peak) + HELD
        values = {
            "config": Phrase(f"check.measure_{name}.name"),
            "rise": rise,
            "naive": mem.peak,
            "ratio": rise / mem.peak,
            "limit": limit,
            "batch": int(params["memory_batch"]),
            "since": since,
            "held": held,
        }
        line = f"measure_{name}_kernel"
        if low_on:
            low_error = kernel_memory.trained(seen, f"memory-{name}-end", total, at, mem.low, travelled)
            if not low_error <= MEMORY_TRAINED["low"] and not error <= MEMORY_TRAINED["low"]:
                checks.append(Check(line, False, "check.measure_kernel.untrained", values))
                continue
            if not (error >= LOW_FLOOR and low_error < error):  # a float32 step, not autocast's
                low = reported(data, "low_precision")
                precision = {"error": Sci(error), "low_error": Sci(low_error), "low": low}
                checks.append(Check(line, False, "check.measure_precision.observed_low", values | precision))
                continue
        elif not error <= MEMORY_TRAINED["checkpoint"]:
            checks.append(Check(line, False, "check.measure_kernel.untrained", values))
            continue
        if rise > limit * mem.peak:
            checks.append(Check(line, False, "check.measure_kernel.failed", values))
        elif since > held:
            checks.append(Check(line, False, "check.measure_kernel.held", values))
        else:
            checks.append(Check(line, True, "check.measure_kernel.passed", values))
    return checks


def _row(name, config, data):
    """One configuration as a check line: what it ran, its time, speed and peak."""
    values = {
        "precision": reported(data, "low_precision") if name in LOW else "float32",
        "accum": reported(data, "accum_steps") if name in ("accum", "all") else 1,
        "checkpoint": Phrase("measure.yes" if name in ("checkpoint", "all") else "measure.no"),
    }
    if config is None:
        return Check(f"measure_{name}", False, "check.measure_run.missing", values)
    if config["steps"] != reported(data, "expected_steps"):
        return Check(
            f"measure_{name}",
            False,
            "check.measure_run.steps",
            {**values, "steps": config["steps"], "expected": reported(data, "expected_steps")},
        )
    ms, low, high, timed = step_times(config)
    per_step = config["samples"] / config["steps"]
    values |= {
        "ms": Sci(ms),
        "rate": round(per_step * 1000 / max(ms, 1e-9)),
        "peak": int(config["peak"] or 0),
    }
    if not timed:  # a trace from before the step times: its one run's mean
        return Check(f"measure_{name}", True, "check.measure_run.passed", values)
    values |= {"low": Sci(low), "high": Sci(high), "timed": timed}
    return Check(f"measure_{name}", True, "check.measure_run.timed", values)


def _precision(params, data, device):
    """The probe's dtypes (the child's report) can fail the line and name the mistake; a pass
    rests on the parameters the supervisor read (``_observed_precision``)."""
    reported_line = _reported_precision(data)
    if not reported_line.passed:
        return reported_line
    return _observed_precision(params, data, device) or reported_line


def _reported_precision(data):
    configs, low = reported(data, "configs"), reported(data, "low_precision")

    def failed(message, name, field):
        seen = ", ".join(configs[name][field]) or "—"
        expected = low if name in LOW else "float32"
        values = {"config": Phrase(f"check.measure_{name}.name"), field: seen, "expected": expected}
        return Check("measure_precision", False, message, values)

    # mixed precision computes in the low dtype and keeps float32 weights for the optimizer
    cast = [n for n in CONFIGS if n in configs and configs[n].get("weights", ["float32"]) != ["float32"]]
    if cast:
        return failed("check.measure_precision.weights", cast[0], "weights")
    wrong = [n for n in CONFIGS if n in configs and configs[n]["dtypes"] != [low if n in LOW else "float32"]]
    if not wrong:
        return Check("measure_precision", True, "check.measure_precision.passed", {"low": low})
    return failed("check.measure_precision.failed", wrong[0], "dtypes")


def _accumulation(params, data, device):
    ref_params = params["reference"]
    ref = accumulation.reference(ref_params)
    run = reported(data, "reference_run")
    if run is None:
        return Check("measure_accumulation", False, "check.measure_accumulation.missing", {})
    steps = [tensors.vector(s) for s in run["steps"]]
    if len(steps) != len(ref.trajectory):
        return Check(
            "measure_accumulation",
            False,
            "check.steps.failed",
            {"steps": len(steps), "reference_steps": len(ref.trajectory)},
        )
    errors = [
        tensors.norm(s - r) / tensors.norm(r - ref.initial)
        for s, r in zip(steps, ref.trajectory, strict=True)
    ]
    tol = accumulation.tolerance(ref_params, device)
    bad = next((t for t, e in enumerate(errors) if not e <= tol), None)
    if bad is not None:
        return Check(
            "measure_accumulation",
            False,
            "check.measure_accumulation.failed",
            {"step": bad + 1, "error": Sci(errors[bad]), "tolerance": Sci(tol)},
        )
    return Check(
        "measure_accumulation",
        True,
        "check.measure_accumulation.passed",
        {"error": Sci(max(errors)), "steps": len(steps)},
    )


def _left_out(config: dict) -> list[int]:
    """The blocks (numbered from 1) that a checkpointed configuration never ran again during
    backward, the last left aside: checkpointing it saves nothing (its recomputation would run as
    soon as backward begins, the peak the same: measured, 0.32× and 0.57× either way), and torch's
    ``checkpoint_sequential`` runs its last segment plain. A block left out before it keeps its
    activations (every other block: 0.39× and 0.72× against 0.32× and 0.57×; the first alone:
    0.46×, 0.86×). What the probe in the learner's process saw: a trace from before it reported
    them (no ``recomputed_blocks``) is judged without it."""
    done, blocks = config.get("recomputed_blocks"), config.get("blocks")
    if done is None and blocks is None:
        return []
    if not (
        type(blocks) is int
        and 1 <= blocks <= 64
        and isinstance(done, list)
        and all(type(b) is int and 0 <= b < blocks for b in done)
    ):
        raise Interfered("shape", detail="the recomputed blocks are not a list of the model's blocks")
    return [b + 1 for b in range(blocks - 1) if b not in done]


def _checkpoint(params, data):
    configs = reported(data, "configs")
    base, ckpt = configs["fp32"]["peak"] or 0, configs["checkpoint"]["peak"] or 0
    drop = float(params["peak_drop"])
    values = {"peak": ckpt, "base": base, "ratio": ckpt / base if base else 0.0, "limit": drop}
    untrained = next((n for n in ("checkpoint", "all") if configs[n].get("blocks_trained") is False), None)
    if untrained is not None:  # torch's reentrant checkpoint of an input without gradients
        values["config"] = Phrase(f"check.measure_{untrained}.name")
        return Check("measure_checkpoint_peak", False, "check.measure_checkpoint_peak.untrained", values)
    if not (configs["checkpoint"]["recomputed"] and configs["all"]["recomputed"]):
        # the peak can fall for other reasons (or the float32 run be made heavier): no block
        # recomputed in backward is no checkpointing
        return Check("measure_checkpoint_peak", False, "check.measure_checkpoint_peak.not_recomputed", values)
    for name in ("checkpoint", "all"):  # the child's count: it can fail a loop, never pass one
        left = _left_out(configs[name])
        if left:
            values |= {"config": Phrase(f"check.measure_{name}.name"), "left": ", ".join(map(str, left))}
            values |= {"count": len(left), "blocks": configs[name]["blocks"]}
            return Check("measure_checkpoint_peak", False, "check.measure_checkpoint_peak.partial", values)
    passed = bool(base) and ckpt <= drop * base
    return Check(
        "measure_checkpoint_peak",
        passed,
        "check.measure_checkpoint_peak.passed" if passed else "check.measure_checkpoint_peak.failed",
        values,
    )


def _observations(params, data):
    """The steps of each timed configuration as the supervisor counted them, each metered
    run's peak as it kept it (CPU), the correctness run's parameters as it read them: the
    child's report must say the same, or the run was interfered with."""
    seen = observed(data)
    configs = reported(data, "configs")
    rounds = reported(data, "rounds", 1)
    if not (type(rounds) is int and 1 <= rounds <= 16):
        raise Interfered("shape", detail="the number of timed runs is not a small count")
    for number, name in enumerate(CONFIGS):
        if name in configs:
            count = sum(1 for e in seen["events"] if e[0] == "step" and e[1] == number)
            agree(configs[name]["steps"], count, "steps")
            seconds = configs[name]["seconds"]  # reported: it passes nothing, but shows
            if not (isinstance(seconds, int | float) and seconds > 0):
                raise Interfered("shape", detail=f"the time of {name} is not a positive number of seconds")
            times = configs[name].get("step_ms", [])
            if not (
                isinstance(times, list)
                and len(times) <= MAX_STEP_TIMES
                and all(isinstance(t, int | float) and math.isfinite(t) and t >= 0 for t in times)
            ):
                raise Interfered("shape", detail=f"the step times of {name} are not a list of times")
    if reported(data, "meter") == "live":
        peaks = [(m or {}).get("peak", 0) for m in reported_meters(seen)]
        said = [configs[n]["peak"] for n in CONFIGS if n in configs and configs[n]["peak"] is not None]
        agree(said, (peaks + [0] * len(said))[: len(said)], "memory")
    run = reported(data, "reference_run")
    if run is not None:
        size = _size(params)
        agree(run["steps"], [s[:size] for s in snapshots(seen, "reference-step")], "parameters")
        agree(run["final_params"], seen["final_params"][:size], "parameters")


def evaluate(params: dict, data: dict, device: str) -> Evaluation:
    _observations(params, data)
    configs = reported(data, "configs")
    cuda = reported(data, "meter") == "cuda"
    repeated = any(config.get("step_ms") for config in configs.values())
    where = Check(
        "measure_device",
        True,
        f"check.measure_device.{'cuda' if cuda else 'cpu'}{'_rounds' if repeated else ''}",
        {
            "name": reported(data, "device_name"),
            "low": reported(data, "low_precision"),
            "rounds": reported(data, "rounds", 1),
        },
    )
    rows = [_row(name, configs.get(name), data) for name in CONFIGS]
    checks = [where, *rows]
    if all(row.passed for row in rows):
        checks += [
            _precision(params, data, device),
            _accumulation(params, data, device),
            _checkpoint(params, data),
        ]
        checks += _kernel(params, data, device)
    metrics = {
        "measured_on": reported(data, "device_name"),
        "low_precision": reported(data, "low_precision"),
        "peak_measure": "max_memory_allocated" if cuda else "live_tensor_bytes",
    }
    for name, config in configs.items():
        if config.get("steps"):
            ms, low, high, timed = step_times(config)
            metrics[f"{name}_ms_per_step"] = round(ms, 3)  # the median step
            if timed:  # the middle half of the timed steps, and how many there were
                metrics[f"{name}_ms_low"], metrics[f"{name}_ms_high"] = round(low, 3), round(high, 3)
                metrics[f"{name}_timed_steps"] = timed
            per_step = config["samples"] / config["steps"]
            metrics[f"{name}_samples_per_s"] = round(per_step * 1000 / max(ms, 1e-9))
            metrics[f"{name}_peak_bytes"] = config["peak"]
    charted = {  # as the metrics round them
        name: (
            metrics[f"{name}_ms_per_step"],
            metrics.get(f"{name}_ms_low", 0.0),
            metrics.get(f"{name}_ms_high", 0.0),
            metrics.get(f"{name}_timed_steps", 0),
            metrics[f"{name}_peak_bytes"],
        )
        for name in CONFIGS
        if f"{name}_ms_per_step" in metrics
    }
    metrics |= {"charts": _charts(charted, metrics), "facts": []}
    diagnosis = None
    if not all(c.passed for c in checks):
        diagnosis = diagnose(checks, data)
    return Evaluation(checks, diagnosis, metrics)


FIGURE = "figure.measure"  # the texts of the kind's charts: messages.d/measure.yaml


def _charts(
    timed: dict[str, tuple[float, float, float, int, int]], metrics: dict[str, Any]
) -> list[ChartRecord]:
    """What the page draws (``contracts.verdict``'s declared charts), bars from zero, the ratios
    being the lesson: each configuration's median step with the middle half of its steps, the
    clearly fastest (``clear_winner``) drawn as the learner's, and its peak memory, the
    smallest so drawn. A configuration is named by its dtype where it is one."""
    rows = [(name, *timed[name]) for name in CONFIGS if name in timed]
    if not rows:
        return []
    low = str(metrics.get("low_precision") or "bfloat16")
    names = {"fp32": "float32", "low": low}

    def label(name: str, kind: str, value: float, **more: Any) -> BarRecord:
        if name in names:
            return bar(f"{FIGURE}.{name}", kind, value, name=names[name], **more)
        return bar(f"{FIGURE}.{name}", kind, value, **more)

    def said(name: str) -> Any:
        return names.get(name) or Phrase(f"{FIGURE}.{name}")

    gpu = metrics.get("measured_on")
    where = "gpu" if isinstance(gpu, str) and gpu and gpu != "cpu" else "cpu"
    spread = all(timed_steps for *_rest, timed_steps, _peak in rows)
    best = min(range(len(rows)), key=lambda i: rows[i][1])
    values: dict[str, Any] = {"gpu": gpu, "label": said(rows[best][0]), "ms": rows[best][1]}
    if not spread:  # a trace from before the step times: one timed run per configuration
        time = chart(
            "configurations-time",
            "ms",
            [label(name, "reference", ms) for name, ms, *_rest in rows],
            f"{FIGURE}.time",
            note=f"{FIGURE}.time.once-{where}",
            summary=f"{FIGURE}.time.once",
            values=values,
        )
    else:
        winner = clear_winner([(ms, lo, hi) for _name, ms, lo, hi, *_rest in rows])
        summary = "fastest" if winner is not None else "overlap" if len(rows) > 1 else "alone"
        if summary == "overlap":
            rival = min((i for i in range(len(rows)) if i != best), key=lambda i: rows[i][2])
            values["other"] = said(rows[rival][0])
        bars = [
            label(name, "yours" if i == winner else "reference", ms, low=lo, high=hi)
            for i, (name, ms, lo, hi, *_rest) in enumerate(rows)
        ]
        values["n"] = min(n for *_rest, n, _peak in rows)
        time = chart(
            "configurations-time",
            "ms",
            bars,
            f"{FIGURE}.time",
            note=f"{FIGURE}.time.{where}",
            summary=f"{FIGURE}.time.{summary}",
            values=values,
        )
    small = min(range(len(rows)), key=lambda i: rows[i][-1])
    memory = chart(
        "configurations-memory",
        "bytes",
        [label(row[0], "yours" if i == small else "reference", row[-1]) for i, row in enumerate(rows)],
        f"{FIGURE}.memory",
        note=f"{FIGURE}.memory.{'gpu' if metrics.get('peak_measure') == 'max_memory_allocated' else 'cpu'}",
        values={"label": said(rows[small][0]), "peak": rows[small][-1]},
    )
    return [time, memory]


def diagnose(checks, data):
    """The known mistake the numbers show, or None."""
    by_name = {c.name: c for c in checks}
    configs = reported(data, "configs")
    precision = by_name.get("measure_precision")
    if precision is not None and not precision.passed:
        if precision.message == "check.measure_precision.weights":  # the model itself was cast
            return Diagnosis("cast-instead-of-autocast", precision.values)
        lows = [configs[n]["dtypes"] for n in LOW]
        if all(d == ["float32"] for d in lows):
            return Diagnosis("precision-ignored", {"low": reported(data, "low_precision")})
        return None
    ckpt = by_name.get("measure_checkpoint_peak")
    if (
        ckpt is not None
        and not ckpt.passed
        and ckpt.message != "check.measure_checkpoint_peak.untrained"  # checkpointed, untrained
        and not (configs["checkpoint"]["recomputed"] or configs["all"]["recomputed"])
    ):
        return Diagnosis("checkpoint-ignored", ckpt.values)
    return None


def diagnose_error(params: dict, data: dict | None, error: dict) -> Diagnosis | None:
    return None
