"""Harness of the "gputrace" kind (lesson 3): the learner reads profiler traces of GPU runs and
names the bottleneck from the GPU's own time.

The learner's ``read_trace(trace)`` gets a Chrome trace as ``torch.profiler`` exports it,
compacted as ``bench/traces.py`` keeps it (host ranges ``user_annotation``, their GPU twins
``gpu_user_annotation``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_runtime``), once
per run, and returns the share of the traced span the GPU was busy, its longest idle stretch
and the bottleneck. The traces are served by the supervisor (``api.serve_items``): each run
begins with a ``run`` sync, where the supervisor draws a seed after the fork; the first run's
seed draws the order of the loops over all runs, and each run's seed a realistic change of the
trace (``perturb``: another clock origin, a faster or slower machine, the leading step cut, the
events listed in another order). The learner's process holds the base traces, never which run
gets which, nor which loop a trace is. The checks (``worker/checks/gputrace.py``) remake every
run's trace from the seeds the supervisor drew and the lesson's trace files, and judge.

The base traces come with the job (``params["bases"]``: the grader sends the files under the
lesson's ``traces/``, which the sandbox cannot read, through the kind's ``job_inputs``), recorded
on a GPU by ``python -m bench.traces`` or made by the queue model below (``--model``). The
supervisor reports their digests, and the checks judge only on the lesson's files.

The queue model (``model_trace``): one host thread and the GPU's streams. Python spends its own
time on each op and calls the CUDA runtime to launch it; the kernel starts once it is launched
and its stream is free, and the host goes on without waiting; a blocking copy or ``.item()``
makes the host wait for the stream. A ``record_function`` range is a ``user_annotation`` on the
host and, where it launched device work, a ``gpu_user_annotation`` from its first device event's
start to its last one's end. Two streams share the GPU without slowing each other here (a real
GPU shares its SMs, so there the side stream's kernels stretch). Durations are set by hand for
each op's size and carry a seeded ±8 %. Standard library only: the checks and ``bench/traces.py``
import it too.

Beside the lesson's three loops, the checks grade two the model makes here whatever the lesson
ships (``EXTRA``): a step that zeroes its key/value cache with two large memsets (a third of
the GPU's work: without them the loop reads as input-bound), and a loop whose last traced step
writes a checkpoint from the host, the GPU idle from its last copy to the end of the span (the
longest idle stretch; a reading from the GPU's first work to its last misses it and the share
it takes from the span).
"""

import contextlib
import hashlib
import json
import math
import random
import socket
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

LOOPS = ("compute", "input", "launch")  # sorted: the order of the bases everywhere
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")
KEEP = ("user_annotation", "gpu_user_annotation", "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime")
CHUNK = 32 * 1024  # one item the supervisor serves: a slice of the run's trace
MAX_TRACE_BYTES = 16 << 20
MAX_CHUNKS = MAX_TRACE_BYTES // CHUNK
MAX_RUNS = 12
ASK = struct.Struct("!I")
LENGTH = struct.Struct("!Q")
HOST_PID, HOST_TID, GPU_PID, MAIN, SIDE = 4242, 4242, 0, 7, 13
PIN_TID = 4251  # a DataLoader's pin-memory thread, in the host process beside the main one
STEPS = 5  # traced steps, as bench/traces.py's profiler schedule keeps
MODEL_SEED = 0

# ---------------------------------------------------------------- the queue model


class Queue:
    """The host's clock, the streams' clocks and the events they leave (µs)."""

    def __init__(self, seed: str) -> None:
        self.rng = random.Random(seed)
        self.host = 1_000.0
        self.streams = {MAIN: 0.0, SIDE: 0.0}
        self.events: list[dict[str, Any]] = []
        self.correlation = 0
        self.open: list[
            list[float]
        ] = []  # the record_function ranges open now: [first device start, last end]
        self.pinned: list[float] = []  # when the pin-memory thread had each batch page-locked
        self.pins: list[dict[str, Any]] = []  # its calls into CUDA, kept apart from the warm-up's clear
        self.batch = 0  # the batches the main thread has taken

    def _jitter(self, us: float) -> float:
        return us * self.rng.uniform(0.92, 1.08)

    def _event(
        self,
        cat: str,
        name: str,
        ts: float,
        dur: float,
        pid: int = HOST_PID,
        tid: int = HOST_TID,
        args: dict[str, Any] | None = None,
    ) -> None:
        event: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    def cpu(self, us: float) -> None:
        """Python's own time: the op's dispatch, the loader's work, the optimizer's loop."""
        self.host += self._jitter(us)

    def launch(
        self,
        name: str,
        us: float,
        stream: int = MAIN,
        cat: str = "kernel",
        call: str = "cudaLaunchKernel",
        cost: float = 5.0,
        wait: bool = False,
    ) -> None:
        """Launch ``name`` (``us`` on the device) on ``stream``; ``wait``: the call returns only
        when it is done (a blocking copy)."""
        self.correlation += 1
        start = self.host
        begin = max(start + 2.0, self.streams[stream])
        dur = self._jitter(us)
        self.streams[stream] = begin + dur
        call_dur = self._jitter(cost)
        if wait:
            call_dur = max(call_dur, begin + dur - start + 1.0)
        args = {"correlation": self.correlation}
        self._event("cuda_runtime", call, start, call_dur, args=args)
        self._event(cat, name, begin, dur, GPU_PID, stream, {**args, "stream": stream, "device": 0})
        for span in self.open:
            span[0] = min(span[0], begin)
            span[1] = max(span[1], begin + dur)
        self.host = start + call_dur

    def op(self, name: str, us: float, python: float = 12.0, stream: int = MAIN) -> None:
        self.cpu(python)
        self.launch(name, us, stream)

    def copy(
        self, name: str, nbytes: int, gb_per_s: float, blocking: bool = True, stream: int = MAIN
    ) -> None:
        self.cpu(8.0)
        us = 1.5 + nbytes / (gb_per_s * 1e3)
        self.launch(name, us, stream, cat="gpu_memcpy", call="cudaMemcpyAsync", cost=6.0, wait=blocking)

    def sync(self, stream: int = MAIN) -> None:
        """``.item()``: the copy of one number back, and the host waits for ``stream``."""
        self.copy("Memcpy DtoH (Device -> Pageable)", 4, 1.0, blocking=True, stream=stream)
        start = self.host
        end = max(start + 2.0, self.streams[stream])
        self._event("cuda_runtime", "cudaStreamSynchronize", start, end - start)
        self.host = end

    def wait_event(self, stream: int, at: float) -> None:
        """``stream.wait_event(event)`` for an event recorded when another stream's clock read
        ``at``: what ``stream`` runs next starts after that."""
        self.cpu(3.0)
        self.streams[stream] = max(self.streams[stream], at)

    @contextlib.contextmanager
    def range(self, name: str) -> Iterator[None]:
        """A ``record_function`` range, and its GPU twin where it launched device work."""
        start = self.host
        span = [math.inf, -math.inf]
        self.open.append(span)
        self.cpu(4.0)
        try:
            yield
        finally:
            self.cpu(3.0)
            self.open.pop()  # ranges nest: the innermost is last
            self._event("user_annotation", name, start, self.host - start)
            if span[0] < math.inf:
                self._event("gpu_user_annotation", name, span[0], span[1] - span[0], GPU_PID, MAIN)


def _input_step(q: Queue) -> None:
    """A small MLP on 224×224 images that a DataLoader with num_workers=0 loads in the main
    process (2 ms a sample, 32 a batch), copied from pageable memory."""
    with q.range("data"):
        for _ in range(32):
            q.cpu(2_300.0)  # decoding one image
        q.cpu(4_000.0)  # collate
    q.copy("Memcpy HtoD (Pageable -> Device)", 32 * 3 * 224 * 224 * 4, 6.0)
    q.copy("Memcpy HtoD (Pageable -> Device)", 32 * 8, 1.0)
    with q.range("forward"):
        for name, us in (("gemm_f32_150528x64", 45.0), ("relu", 2.0), ("gemm_f32_64x10", 3.0)):
            q.op(name, us)
        q.op("log_softmax", 3.0)
        q.op("nll_loss_forward", 3.0)
    with q.range("backward"):
        q.cpu(20.0)
        q.launch("Memset (Device)", 1.0, cat="gpu_memset", call="cudaMemsetAsync")
        for name, us in (
            ("nll_loss_backward", 3.0), ("log_softmax_backward", 3.0), ("gemm_f32_dW_10x64", 3.0),
            ("gemm_f32_dX_32x64", 3.0), ("reduce_sum_bias", 3.0), ("threshold_backward", 2.0),
            ("gemm_f32_dW_64x150528", 48.0), ("reduce_sum_bias", 3.0),
        ):  # fmt: skip
            q.op(name, us, python=18.0)
    with q.range("optimizer"):
        q.cpu(60.0)
        q.op("multi_tensor_apply_kernel<SGD>", 40.0)
        q.cpu(40.0)  # zero_grad(set_to_none=True): no kernel
        q.sync()  # losses.append(loss.item())


def _compute_step(q: Queue) -> None:
    """Six 4096-wide layers at batch 512, the batch already on the GPU; a deeper frozen teacher
    runs its forward for the next batch on a side stream (distillation): the loss waits only for
    the teacher's forward of the step before."""
    with q.range("data"):
        q.cpu(15.0)
    with q.range("forward"):
        previous = q.streams[SIDE]  # an event recorded after the teacher's previous forward
        for _ in range(14):  # the teacher, on the side stream, for the next batch
            q.op("gemm_f32_512x4096x4096", 450.0, python=14.0, stream=SIDE)
            q.op("relu", 30.0, python=10.0, stream=SIDE)
        for _ in range(6):
            q.op("gemm_f32_512x4096x4096", 450.0, python=14.0)
            q.op("relu", 30.0, python=10.0)
        q.op("gemm_f32_512x4096x10", 20.0)
        q.wait_event(MAIN, previous)  # the teacher's logits of this batch, made a step before
        q.op("log_softmax", 6.0)
        q.op("kl_div", 6.0)
    with q.range("backward"):
        q.cpu(20.0)
        q.op("kl_div_backward", 6.0, python=18.0)
        q.op("log_softmax_backward", 6.0, python=18.0)
        q.op("gemm_f32_dW_10x4096", 20.0, python=18.0)
        q.op("gemm_f32_dX_512x10", 20.0, python=18.0)
        for _ in range(6):
            q.op("threshold_backward", 30.0, python=18.0)
            q.op("gemm_f32_dW_4096x4096", 450.0, python=18.0)
            q.op("gemm_f32_dX_512x4096", 450.0, python=18.0)
            q.op("reduce_sum_bias", 10.0, python=18.0)
    with q.range("optimizer"):
        q.cpu(80.0)
        for _ in range(3):
            q.op("multi_tensor_apply_kernel<SGD>", 130.0, python=20.0)
        q.cpu(40.0)
        q.sync()  # losses.append(loss.item()): the host waits for the queue here


def _launch_step(q: Queue) -> None:
    """Sixty Linear(32, 32)+Tanh layers at batch 1: each kernel takes a few µs, each launch more."""
    with q.range("data"):
        q.cpu(15.0)
    with q.range("forward"):
        for _ in range(60):
            q.op("gemm_f32_1x32x32", 3.0)
            q.op("tanh", 2.0)
        q.op("gemm_f32_1x32x10", 3.0)
        q.op("log_softmax", 2.5)
        q.op("nll_loss_forward", 2.5)
    with q.range("backward"):
        q.cpu(20.0)
        q.launch("Memset (Device)", 1.0, cat="gpu_memset", call="cudaMemsetAsync")
        q.op("nll_loss_backward", 2.5, python=14.0)
        q.op("log_softmax_backward", 2.5, python=14.0)
        for _ in range(61):
            q.op("gemm_f32_dW_32x1", 3.0, python=14.0)
            q.op("gemm_f32_dX_1x32", 3.0, python=14.0)
            q.op("reduce_sum_bias", 2.5, python=14.0)
            q.op("tanh_backward", 2.0, python=14.0)
    with q.range("optimizer"):
        q.cpu(150.0)  # the foreach lists of 122 tensors
        for _ in range(2):
            q.op("multi_tensor_apply_kernel<SGD>", 6.0, python=20.0)
        q.cpu(90.0)
        q.sync()


def _zeroing_step(q: Queue) -> None:
    """A small decoder whose step makes its key/value cache anew with ``torch.zeros``: two
    512 MiB memsets (about 350 µs each at 1.5 TB/s) before a few short kernels; the host then
    tokenises the next batch in the main process while the GPU has nothing queued. The memsets
    are a third of the GPU's work: a reading that leaves them out finds it idle most of the step."""
    with q.range("data"):
        q.cpu(700.0)  # tokenising the next batch's text
    q.copy("Memcpy HtoD (Pinned -> Device)", 64 * 512 * 8, 20.0, blocking=False)
    with q.range("forward"):
        for _ in range(2):  # torch.zeros for the cache's keys, then its values
            q.cpu(10.0)
            q.launch("Memset (Device)", 350.0, cat="gpu_memset", call="cudaMemsetAsync")
        for name, us in (
            ("embedding", 20.0),
            ("gemm_f32_qkv", 70.0),
            ("attention", 90.0),
            ("gemm_f32_out", 50.0),
        ):
            q.op(name, us)
        q.op("cross_entropy", 15.0)
    with q.range("backward"):
        q.cpu(20.0)
        for name, us in (
            ("cross_entropy_backward", 15.0),
            ("gemm_f32_dW", 80.0),
            ("attention_backward", 140.0),
        ):
            q.op(name, us, python=18.0)
    with q.range("optimizer"):
        q.cpu(40.0)
        q.op("multi_tensor_apply_kernel<Adam>", 60.0, python=20.0)
        q.sync()  # losses.append(loss.item())


def _checkpoint_step(q: Queue) -> None:
    """A mid-sized model whose batch is collated on the host (about 1.2 ms), then 3.5 ms of
    kernels queued well ahead of them; the host waits at ``.item()``."""
    with q.range("data"):
        q.cpu(1_200.0)  # collate
    q.copy("Memcpy HtoD (Pinned -> Device)", 256 * 1024 * 4, 20.0, blocking=False)
    with q.range("forward"):
        for _ in range(8):
            q.op("gemm_f32_256x2048x2048", 180.0, python=14.0)
            q.op("gelu", 20.0, python=10.0)
    with q.range("backward"):
        q.cpu(20.0)
        for _ in range(8):
            q.op("gemm_f32_dW_2048x2048", 180.0, python=18.0)
            q.op("gemm_f32_dX_256x2048", 20.0, python=18.0)
    with q.range("optimizer"):
        q.cpu(60.0)
        q.op("multi_tensor_apply_kernel<AdamW>", 220.0, python=20.0)
        q.sync()


def _checkpoint_tail(q: Queue) -> None:
    """The last traced step ends with a checkpoint: the weights copied to the host (blocking),
    then written to disk by the host alone (``torch.save``, about 6 ms), the GPU idle until the
    trace ends."""
    with q.range("checkpoint"):
        for _ in range(4):
            q.copy("Memcpy DtoH (Device -> Pageable)", 16 << 20, 12.0)
        q.cpu(6_000.0)  # pickling and writing the state dict


PIN_EVERY, PIN_AHEAD = 2_500.0, 6  # a batch from the workers every 2.5 ms; 3 workers × prefetch 2 ahead


def _pin_until(q: Queue, batch: int) -> None:
    """The pin-memory thread page-locks every batch up to ``batch`` as the workers hand them
    over (one each ``PIN_EVERY``): each a ``cudaHostAlloc`` of its own (the text is padded to its
    longest, so each batch has a new size), on its own thread, outside every range the main
    thread opened."""
    while len(q.pinned) <= batch:
        handed = q.pins[0]["ts"] - 1.0 + len(q.pinned) * PIN_EVERY if q.pins else q.host
        start = max(handed, q.pinned[-1] + 15.0 if q.pinned else handed)
        dur = q._jitter(1_100.0)
        q.pins.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaHostAlloc", "pid": HOST_PID,
             "tid": PIN_TID, "ts": start, "dur": dur}
        )  # fmt: skip
        q.pinned.append(start + dur)


def _pinned_step(q: Queue) -> None:
    """A mid-sized model fed by a DataLoader with ``pin_memory=True``: the main thread takes each
    batch once the pin-memory thread has page-locked it, copies it without blocking, and reads
    no loss: nothing holds the host, which runs ahead of the GPU (a step of about 1 ms of
    launches against 3.6 ms of GPU work, paced at 2.5 ms by the workers). The last traced step's
    work runs on after its range has closed, until the profiler's closing synchronisation
    (``_profiler_stop``), and the pin-memory thread goes on pinning the next batches after that."""
    with q.range("data"):
        q.cpu(30.0)
        _pin_until(q, q.batch + PIN_AHEAD)
        q.host = max(q.host, q.pinned[q.batch])  # next(): waits for its batch to be pinned
        q.cpu(20.0)
    q.batch += 1
    q.copy("Memcpy HtoD (Pinned -> Device)", 8 << 20, 20.0, blocking=False)
    with q.range("forward"):
        for _ in range(8):
            q.op("gemm_f32_1024x1024x1024", 120.0, python=14.0)
            q.op("gelu", 15.0, python=10.0)
        q.op("cross_entropy", 10.0)
    with q.range("backward"):
        q.cpu(20.0)
        q.op("cross_entropy_backward", 10.0, python=18.0)
        for _ in range(8):
            q.op("gemm_f32_dW_1024x1024", 120.0, python=18.0)
            q.op("gemm_f32_dX_1024x1024", 120.0, python=18.0)
    with q.range("optimizer"):
        q.cpu(60.0)
        q.op("multi_tensor_apply_kernel<AdamW>", 200.0, python=20.0)
        q.cpu(40.0)  # zero_grad(set_to_none=True); the loss is summed on the GPU, never read


def _profiler_stop(q: Queue) -> None:
    """The profiler's stop after the last step: it synchronises the device
    (``cudaDeviceSynchronize``), which waits for the work still queued."""
    start = q.host + q._jitter(20.0)
    end = max(start + 2.0, *q.streams.values()) + q._jitter(6.0)
    q._event("cuda_runtime", "cudaDeviceSynchronize", start, end - start)
    q.host = end


STEP = {
    "input": _input_step,
    "compute": _compute_step,
    "launch": _launch_step,
    "zeroing": _zeroing_step,
    "checkpoint": _checkpoint_step,
    "pinned": _pinned_step,
}
TAIL = {"checkpoint": _checkpoint_tail}  # after the last traced step's own work, inside its range
# Loops the checks grade beside the lesson's trace files, made here by the queue model whatever
# the lesson ships (recorded or modelled), each with the bottleneck it was built to have: memsets
# are a third of the zeroing loop's GPU time (without them it reads as input-bound), and the
# checkpoint's trace ends with the GPU idle for its longest stretch (its edges matter)
EXTRA = {"zeroing": "compute", "checkpoint": "compute", "pinned": "compute"}
# the pinned loop's trace runs past its last step's range twice over: the GPU's queued work, up
# to the profiler's closing synchronisation, then the pin-memory thread's calls into CUDA, the
# GPU idle under them (issue 41, red team 4: a span taken from the step ranges, or one that left
# the runtime calls out, agreed with the right one on every trace graded before)
CLOSE = {"pinned": _profiler_stop}


def model_trace(loop: str, seed: int = MODEL_SEED, steps: int = STEPS) -> dict[str, Any]:
    """The modelled Chrome trace of ``loop`` (a key of ``STEP``): ``steps`` profiled steps
    (``ProfilerStep#1``…), compacted as ``bench/traces.py`` keeps a recorded one."""
    q = Queue(f"{loop}-{seed}")
    STEP[loop](q)  # the warm-up step the profiler's schedule does not keep
    q.host = max(q.host, *q.streams.values())  # its work done before the window opens
    q.events.clear()
    opened = q.host
    for number in range(1, steps + 1):
        with q.range(f"ProfilerStep#{number}"):
            STEP[loop](q)
            if number == steps and loop in TAIL:
                TAIL[loop](q)
    if loop in CLOSE:
        CLOSE[loop](q)
    q.events += [pin for pin in q.pins if pin["ts"] >= opened]  # the pin-memory thread's, in the window
    q.streams[MAIN] = max(q.streams.values())
    for event in q.events:
        event["ts"], event["dur"] = round(event["ts"], 3), round(event["dur"], 3)
    events = sorted(q.events, key=lambda e: (e["pid"] != HOST_PID, e["ts"]))  # as exported: host first
    meta = [
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": MAIN, "args": {"name": "stream 7"}},
    ]
    if loop == "compute":
        meta.append(
            {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": SIDE, "args": {"name": "stream 13"}}
        )
    if q.pins:
        pin = {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": PIN_TID}
        meta.append({**pin, "args": {"name": "pin_memory"}})
    return {"displayTimeUnit": "ms", "traceEvents": meta + events}


def extra_bases() -> list[dict[str, Any]]:
    """The traces of ``EXTRA``'s loops, in its order: graded after the lesson's files."""
    return [model_trace(loop) for loop in EXTRA]


# ---------------------------------------------------------------- what each run gets


def digest(trace: Any) -> str:
    """The identity of a base trace, the same wherever it was made or read."""
    text = json.dumps(trace, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def order(first_seed: int, loops: int, rounds: int) -> list[int]:
    """Which base (an index into the sorted loops) each run gets: every loop ``rounds`` times,
    in an order drawn from the first run's seed."""
    runs = [i for _ in range(rounds) for i in range(loops)]
    random.Random(f"order-{first_seed}").shuffle(runs)
    return runs


def perturb(trace: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """``trace`` as another run of the same loop could have recorded it: another clock origin,
    every time scaled alike (a machine 15 % faster or slower), the first profiled step left out
    or not (the window starts mid-queue), the events listed in another order."""
    rng = random.Random(f"shape-{seed}")
    scale = rng.uniform(0.85, 1.15)
    origin = rng.randrange(10**9, 10**12) + rng.random()
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in KEEP]
    steps = sorted(
        e["ts"] for e in events if e["cat"] == "user_annotation" and e["name"].startswith("ProfilerStep#")
    )
    cut = steps[1] if len(steps) > 2 and rng.random() < 0.5 else -math.inf
    kept = [
        {**e, "ts": round(origin + e["ts"] * scale, 3), "dur": round(e["dur"] * scale, 3)}
        for e in events
        if e["ts"] >= cut
    ]
    rng.shuffle(kept)
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    return {**{k: v for k, v in trace.items() if k != "traceEvents"}, "traceEvents": meta + kept}


def payload(trace: Any) -> bytes:
    """A run's trace as the supervisor serves it: its length, then its JSON."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False).encode()
    return LENGTH.pack(len(text)) + text


def chunks(data: bytes) -> int:
    return max(1, -(-len(data) // CHUNK))


class Served:
    """The supervisor's side: each run's trace, made from the seeds its ``Items`` draws."""

    def __init__(self, bases: Sequence[Mapping[str, Any]], rounds: int) -> None:
        self.bases, self.rounds = bases, rounds
        self.items: Any = None  # the ``Items`` server, set once it exists
        self._made: dict[int, bytes] = {}

    def make(self, seed: int, index: int) -> bytes:
        seeds = self.items.seeds
        if seed not in self._made:
            run = len(seeds) - 1
            base = self.bases[
                order(seeds[0], len(self.bases), self.rounds)[run % (len(self.bases) * self.rounds)]
            ]
            self._made = {seed: payload(perturb(base, seed))}  # one run at a time
        data = self._made[seed]
        return data[index * CHUNK : (index + 1) * CHUNK].ljust(CHUNK, b"\0")


def fetch(address: bytes) -> Any:
    """The child's side: this run's trace, asked for slice by slice."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        data, index, total = b"", 0, None
        while total is None or len(data) < total:
            sock.sendall(ASK.pack(index))
            answer = b""
            while len(answer) < 1 + CHUNK:
                part = sock.recv(1 + CHUNK - len(answer))
                if not part:
                    raise ConnectionError("the trace's server closed the connection")
                answer += part
            if answer[0] != 0:
                raise ConnectionError("the trace's server refused a slice")
            data += answer[1:]
            if total is None:
                total = LENGTH.size + LENGTH.unpack(data[: LENGTH.size])[0]
            index += 1
        return json.loads(data[LENGTH.size : total])
    finally:
        sock.close()


# ---------------------------------------------------------------- the learner's answer

MAX_TEXT = 40


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except BaseException:  # noqa: BLE001 (the learner's object: anything may raise)
        return None
    return number if math.isfinite(number) else None


def read_answer(value: object) -> dict[str, Any]:
    """What the learner returned, as data: numbers (None where not a finite number), text cut."""
    if not isinstance(value, dict):
        return {"type": type(value).__name__[:MAX_TEXT]}
    answer: dict[str, Any] = {"type": "dict"}
    for key in ("busy", "idle_ms"):
        raw = dict.get(value, key)
        answer[key] = None if raw is None or isinstance(raw, bool | str) else _number(raw)
    name = dict.get(value, "bottleneck")
    answer["bottleneck"] = str.__str__(name)[:MAX_TEXT] if isinstance(name, str) else None
    return answer


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    bases = params["bases"]  # sent by the grader (checks/gputrace.py job_inputs); none is ours to fix
    rounds = int(params.get("rounds", 1))
    runs_count = min(len(bases) * rounds, MAX_RUNS)
    served = Served(bases, rounds)
    items = served.items = api.serve_items(MAX_CHUNKS, 0.0, served.make, CHUNK)

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        fn = api.load_entry()
        api.check_signature(fn, ["trace"])
        runs: list[dict[str, Any]] = []
        for number in range(runs_count):
            api.sync("run", number)
            trace = fetch(items.address)
            value, error = api.call_for_value(fn, [trace])
            runs.append(read_answer(value) if error is None else {"type": "error"})
            if error is not None:
                return {"runs": runs}, error
        return {"runs": runs}, None

    data, error = api.supervise(learner)
    if isinstance(data, dict):  # here, in the supervisor, once the child is dead: what it was fed
        data["bases"] = [digest(base) for base in bases]
    return data, error
