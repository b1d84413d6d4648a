"""Record the profiler traces that lesson 3's GPU-method exercise is graded on.

    .venv/bin/python -m bench.traces [--out DIR]     # on a machine with CUDA; minutes at most
    .venv/bin/python -m bench.traces --model [--out DIR]   # anywhere: the queue model's traces

Lesson 3 teaches that on a GPU the host-side labels lie and the verdict comes from the GPU's own
time: device time, idle gaps, and the same-batch test. This script records, on a real GPU, one
`torch.profiler` trace (CPU and CUDA activities) for each of three training loops whose
bottleneck is known by construction, and measures the same-batch test beside each:

    input     a DataLoader with num_workers=0 over 224x224 images that take ITEM_MS each to
              load, copied from pageable memory: the GPU sits idle while the main process
              loads the next batch
    compute   six 4096-wide layers fed from a batch already on the GPU, while a deeper frozen
              teacher runs its forward for the next batch on a side stream (distillation): the
              GPU is never idle, and two streams overlap
    launch    a deep stack of tiny layers at batch size 1: thousands of short kernels with gaps,
              the GPU waiting for Python to launch the next one

Every step logs its loss with `loss.item()` inside the "optimizer" range, as training loops do:
on the compute loop that range absorbs the wait for the GPU.

Each trace keeps only what the exercise reads and a trace viewer (Perfetto) shows: the
`record_function` ranges on the host (`user_annotation`), their GPU twins (`gpu_user_annotation`),
the kernels, copies and memsets, and the CUDA runtime calls; the rest (every CPU op) is dropped to
keep the files small. `DIR/<loop>.json` is a Chrome trace; `DIR/traces.json` says where they come
from (`"source": "recorded"`, with the GPU, its driver, CUDA and torch named), and per loop the
bottleneck, the synchronised step time with the loader and with the same batch kept on the GPU,
and the trace's own device-busy share.

Without CUDA it says so in one line and exits 0, writing nothing: the traces wait for a GPU.
`--model` writes the same files from the queue model of a GPU in worker/harness/gputrace.py
(host launches, kernels that run behind them on two streams, the loader's waits, many tiny
kernels with launch gaps), with `"source": "modelled"`: what the exercise is graded on until a
GPU records the real ones. The model has no same-batch test to time; its traces.json says so.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.config import ROOT

OUT = ROOT / "lessons" / "03-bottleneck" / "traces"
ITEM_MS = 2.0  # the input loop's loading time per sample
WARMUP, ACTIVE = 3, 5  # profiler schedule: untraced warm-up steps, then traced steps
SAME_BATCH_STEPS = 20
KEEP = {"user_annotation", "gpu_user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime"}
PHASES = ("data", "forward", "backward", "optimizer")


def compact(trace: dict[str, Any]) -> dict[str, Any]:
    """A Chrome trace reduced to the events the exercise reads (see KEEP), metadata kept."""
    events = [
        e
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "M" or (e.get("ph") == "X" and e.get("cat") in KEEP)
    ]
    keep = ("deviceProperties", "displayTimeUnit", "baseTimeNanoseconds")
    return {**{k: trace[k] for k in keep if k in trace}, "traceEvents": events}


def device_busy(trace: dict[str, Any]) -> tuple[float, float]:
    """(share of the traced span the GPU was running kernels or copies, the span in ms)."""
    spans = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    )
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] in PHASES]
    if not spans or not steps:
        return 0.0, 0.0
    start = min(e["ts"] for e in steps)
    end = max(e["ts"] + e["dur"] for e in steps)
    busy, covered = 0.0, start
    for a, b in spans:  # union of the device intervals inside [start, end]
        a, b = max(a, covered), min(b, end)
        if b > a:
            busy += b - a
            covered = b
    return busy / (end - start), (end - start) / 1000


# ---------------------------------------------------------------- the three loops (CUDA only)


Loop = tuple[Callable[[], Iterator[Any]], Callable[[Any], None]]  # (new batch iterator, one step)


def _loops() -> dict[str, Callable[[], Loop]]:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int):
            time.sleep(ITEM_MS / 1000)  # decoding an image, say
            return torch.randn(3, 224, 224), i % 10

    def trainer(model: nn.Module, forward: Callable[[Any, Any], Any] | None = None) -> Callable[[Any], None]:
        model.cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = nn.CrossEntropyLoss()
        losses: list[float] = []

        def step(batch: Any) -> None:
            x, y = batch
            x, y = x.to("cuda"), y.to("cuda")
            with torch.profiler.record_function("forward"):
                loss = forward(x, y) if forward is not None else loss_fn(model(x), y)
            with torch.profiler.record_function("backward"):
                loss.backward()
            with torch.profiler.record_function("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.item())  # the loop logs its loss: a sync, here
                del losses[:-100]

        return step

    def input_loop():
        model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 224 * 224, 64), nn.ReLU(), nn.Linear(64, 10))
        loader = DataLoader(Slow(), batch_size=32)  # num_workers=0: 64 ms of loading per batch
        return (lambda: iter(loader)), trainer(model)

    def compute_loop():
        def tower(depth: int) -> nn.Sequential:
            return nn.Sequential(
                *[m for _ in range(depth) for m in (nn.Linear(4096, 4096), nn.ReLU())], nn.Linear(4096, 10)
            )

        student, teacher = tower(6), tower(14).cuda().eval().requires_grad_(False)
        side = torch.cuda.Stream()
        x = torch.randn(512, 4096, device="cuda")
        y = torch.randint(0, 10, (512,), device="cuda")
        ahead: dict[str, Any] = {}

        def teacher_ahead(x: Any) -> None:  # the next batch's logits, on the side stream
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                ahead["logits"] = teacher(x)
            ahead["ready"] = torch.cuda.Event()
            ahead["ready"].record(side)

        teacher_ahead(x)

        def distill(x: Any, y: Any) -> Any:
            logits, ready = ahead["logits"], ahead["ready"]
            teacher_ahead(x)  # the batches are all the same here: the next one is x again
            out = student(x)
            torch.cuda.current_stream().wait_event(ready)
            logits.record_stream(torch.cuda.current_stream())
            return nn.functional.kl_div(
                out.log_softmax(-1), logits.log_softmax(-1), log_target=True, reduction="batchmean"
            )

        def batches():
            while True:
                yield x, y

        return batches, trainer(student, distill)

    def launch_loop():
        model = nn.Sequential(
            *[m for _ in range(60) for m in (nn.Linear(32, 32), nn.Tanh())], nn.Linear(32, 10)
        )
        x = torch.randn(1, 32, device="cuda")
        y = torch.randint(0, 10, (1,), device="cuda")

        def batches():
            while True:
                yield x, y

        return batches, trainer(model)

    return {"input": input_loop, "compute": compute_loop, "launch": launch_loop}


def _timed(step: Callable[[Any], None], batches: Iterator[Any], n: int, same: Any = None) -> float:
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(n):
        step(same if same is not None else next(batches))
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / n * 1000


def record(name: str, make: Callable[[], Loop], out: Path) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    new_batches, step = make()
    batches = new_batches()
    for _ in range(WARMUP):
        step(next(batches))
    with_loader = _timed(step, batches, SAME_BATCH_STEPS)
    one = tuple(t.to("cuda") for t in next(batches))
    same_batch = _timed(step, batches, SAME_BATCH_STEPS, same=one)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=ACTIVE)) as prof:
            for _ in range(1 + ACTIVE):
                with record_function("data"):
                    batch = next(batches)
                step(batch)
                prof.step()
        torch.cuda.synchronize()
        prof.export_chrome_trace(str(raw))
        trace = compact(json.loads(raw.read_text()))
    write(out, name, trace)
    return {
        **_facts(name, trace),
        "ms_per_step_with_loader": round(with_loader, 3),
        "ms_per_step_same_batch": round(same_batch, 3),
    }


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"


def _facts(name: str, trace: dict[str, Any]) -> dict[str, Any]:
    """What traces.json says of one trace: the exercise's own measures of it beside the rest."""
    from worker.checks.gputrace import measure

    busy, span_ms = device_busy(trace)
    truth = measure(trace)
    return {
        "bottleneck": name,
        "trace": f"{name}.json",
        "traced_steps": ACTIVE,
        "traced_span_ms": round(span_ms, 3),
        "device_busy_share": round(busy, 4),
        "gpu_busy_share": round(truth["busy"], 4),  # over the whole trace, as the exercise reads it
        "longest_idle_ms": round(truth["idle_ms"], 3),
        "events": len(trace["traceEvents"]),
    }


def write(out: Path, name: str, trace: dict[str, Any]) -> None:
    (out / f"{name}.json").write_text(json.dumps(trace, separators=(",", ":")))


def modelled(out: Path) -> int:
    """The queue model's traces (worker/harness/gputrace.py), in the recorded ones' format."""
    from worker.harness import gputrace

    out.mkdir(parents=True, exist_ok=True)
    loops = {}
    for name in ("input", "compute", "launch"):
        trace = gputrace.model_trace(name)
        write(out, name, trace)
        loops[name] = {**_facts(name, trace), "ms_per_step_with_loader": None, "ms_per_step_same_batch": None}
    meta = {
        "source": "modelled",
        "model": "worker/harness/gputrace.py: a queue model of one host thread and the GPU's streams",
        "model_seed": gputrace.MODEL_SEED,
        "note": "no GPU recorded these: `python -m bench.traces` on a CUDA machine replaces them with "
        "recorded traces; the model times no same-batch test",
        "item_ms": ITEM_MS,
        "loops": loops,
    }
    (out / "traces.json").write_text(json.dumps(meta, indent=2) + "\n")
    for name, facts in loops.items():
        print(
            f"{name}: GPU busy {facts['gpu_busy_share']:.1%} of the trace, longest idle "
            f"{facts['longest_idle_ms']:.2f} ms, {facts['events']} events (modelled)"
        )
    print(f"bench.traces: {len(loops)} modelled traces in {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traces", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where the traces go (default {OUT})")
    parser.add_argument(
        "--model", action="store_true", help="write the queue model's traces instead (no GPU needed)"
    )
    args = parser.parse_args(argv)
    if args.model:
        return modelled(args.out)
    import torch

    if not torch.cuda.is_available():
        print(
            "bench.traces: no CUDA here; the GPU-method traces wait for a GPU (--model: the modelled ones)",
            file=sys.stderr,
        )
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    loops = {name: record(name, make, args.out) for name, make in _loops().items()}
    meta = {
        "source": "recorded",
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "driver": _driver(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "recorded": time.strftime("%Y-%m-%d"),
        "item_ms": ITEM_MS,
        "loops": loops,
    }
    (args.out / "traces.json").write_text(json.dumps(meta, indent=2) + "\n")
    for name, facts in loops.items():
        stall = facts["ms_per_step_with_loader"] - facts["ms_per_step_same_batch"]
        print(
            f"{name}: {facts['ms_per_step_with_loader']:.1f} ms/step with the loader, "
            f"{facts['ms_per_step_same_batch']:.1f} on the same batch (stall {stall:.1f} ms), "
            f"GPU busy {facts['gpu_busy_share']:.0%} of the trace, {facts['events']} events"
        )
    print(f"bench.traces: {len(loops)} traces on {props.name} (torch {torch.__version__}) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
