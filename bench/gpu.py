"""`make gpu-check`: the CUDA path proven in one run, its figures written to docs/gpu.md.

    make gpu-check                   # or: .venv/bin/python -m bench.gpu [--output PATH]

On a machine with CUDA it checks what the CPU cannot: the sandbox bound to one GPU (only that
GPU's device nodes, the seccomp filter, a job uid that is not host root, memory limits), every
exercise proven on CUDA as ``treino lessons check`` proves it on the CPU (autocast in float16,
and in bfloat16 where the card has it), every claim of the course that only a GPU can show (the
``device: cuda`` entries of lessons/*/claims.yaml, each by its proof script), the figures a
learner sees on the GPU beside the CPU's, what CUDA's start-up costs, and one submission through
the web and a GPU worker. Each check is a row of docs/gpu.md; the exit status is 1 when any row
failed. Without CUDA it says so in one line, exits 0 and leaves docs/gpu.md as it is. On a lent
machine, which reaches no package registry, ``python3 -m bench.gpu_kit run`` runs it from the kit
carried there (bench/gpu_kit.py).
"""

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from app.config import ROOT

if TYPE_CHECKING:  # imported where used: `make gpu-check` answers at once without CUDA
    from app.lessons.course import Exercise
    from app.lessons.proofs import Proven
    from worker.grading import Grader

LIMIT_SECONDS = 6 * 60  # the whole run, on one GPU: a rerun still fits the lent 15 minutes
POOL_SIZE = 6  # warm sandboxes while the exercises are proven: warm-ups overlap the jobs
PROBE_EXERCISE = "gradient-accumulation/accumulate"  # probes run as its submissions
FIGURES_EXERCISE = "gpu-memory/fit-the-budget"  # its model is the one the figures probe times
MARK = "GPUCHECK "  # a probe's facts: one line of JSON after this
FIRST_KERNEL_MS = 50  # a warm sandbox's first kernel; a context made in the job costs far more
STEPS = 20  # timed steps per figure
HANDOFF_RATIO = 1.5  # a forked job's hand-off → verdict on CUDA, at most this × the CPU's
CONTEXT_PROBE_MIB = 256  # what the context probe holds on the GPU, so NVML tells its process
ATTACKS = ("SIGSTOP", "SIGTERM", "SIGKILL")  # sent by the learner's code to its supervisor

SANDBOX = "Sandbox on the GPU"
EXERCISES = "Exercises on CUDA"
FIGURES = "Figures a learner sees: CUDA beside the CPU"
START_UP = "CUDA start-up"
CLAIMS = "The course's claims on CUDA"
WEB = "End to end"
RUN = "This run"
SECTIONS = (SANDBOX, EXERCISES, CLAIMS, FIGURES, START_UP, WEB, RUN)

Status = Literal["passed", "failed", "n/a"]


@dataclasses.dataclass(frozen=True)
class Result:
    """One row of the report: a check, or a figure (passed once measured)."""

    section: str
    name: str
    status: Status
    measured: str = ""


def ok(passed: bool) -> Status:
    return "passed" if passed else "failed"


# ---------------------------------------------------------------- probes (learner code)

FACTS_PROBE = r"""
import json, os, time
import torch


def _text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


status = dict(line.split(":", 1) for line in _text("/proc/self/status").splitlines() if ":" in line)
facts = {"nodes": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia")),
         "seccomp": status.get("Seccomp", "").strip(),
         "uid_map": _text("/proc/self/uid_map"),
         "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
         "cuda": torch.cuda.is_available()}
if facts["cuda"]:
    started = time.perf_counter()
    torch.ones(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    facts["first_kernel_ms"] = (time.perf_counter() - started) * 1000
    facts["uuids"] = [str(torch.cuda.get_device_properties(i).uuid)
                      for i in range(torch.cuda.device_count())]
    facts["free_bytes"], facts["total_bytes"] = torch.cuda.mem_get_info()
print("GPUCHECK " + json.dumps(facts))
"""

# One training step of lesson 4's model, as configured (device, dtype, autocast): bytes saved
# for backward (the device-independent figure verdicts show), on CUDA max_memory_allocated
# above what the step starts with, and the median time per step (synchronised on CUDA).
FIGURES_PROBE = r"""
import json, statistics, time
import torch
from harness import memory, scenarios


def figures(device, dtype, amp):
    model, batches, loss_fn = scenarios.block_net(PARAMS, getattr(torch, dtype))
    model.to(device)
    x, y = (t.to(device) for t in batches[0])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    cuda = device == "cuda"

    def step():
        optimizer.zero_grad()
        with torch.autocast(device, dtype=getattr(torch, amp or "float16"), enabled=amp is not None):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    with memory.SavedTensorMeter(model.parameters()) as meter:
        step()
    out = {"device": device, "dtype": dtype, "amp": amp, "saved_bytes": meter.peak}
    if cuda:
        resting = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        out["cuda_peak_bytes"] = torch.cuda.max_memory_allocated() - resting
    times = []
    for _ in range(STEPS):
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) * 1000)
    out["ms_per_step"] = statistics.median(times)
    return out


print("GPUCHECK " + json.dumps([figures(*config) for config in CONFIGS]))
"""

GPU_MEMORY_BOMB = """
import torch
hoard = []
while True:
    hoard.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
"""

# Holds CONTEXT_PROBE_MIB on the GPU for a while, so that the worker reads NVML's process list
# meanwhile: the learner's process holds the most, and its parent, the supervisor, a context too.
CONTEXT_PROBE = """
import time
import torch
hold = torch.empty(MIB << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(SECONDS)
"""

HOST_MEMORY_BOMB = """
hoard = []
while True:
    hoard.append(bytearray(64 * 1024 * 1024))
"""


def context_source(seconds: float = 3.0) -> str:
    return CONTEXT_PROBE.replace("MIB", str(CONTEXT_PROBE_MIB)).replace("SECONDS", str(seconds))


def attack_source(solution: str, signal_name: str) -> str:
    """``solution`` (a correct loop) whose module first sends ``signal_name`` to its parent: the
    supervisor, where the learner's code runs in a child of its own."""
    return f"import os, signal\nos.kill(os.getppid(), signal.{signal_name})\n{solution}"


def figures_source(params: dict, configs: list[tuple[str, str, str | None]]) -> str:
    """The figures probe for lesson 4's ``params``, measuring each (device, dtype, autocast)."""
    return (
        f"import json\nPARAMS = json.loads({json.dumps(params)!r})\n"
        f"CONFIGS = json.loads({json.dumps(configs)!r})\nSTEPS = {STEPS}\n" + FIGURES_PROBE
    )


class ProbeError(RuntimeError):
    """A probe did not get as far as reporting; the message says what happened instead."""


def probe_facts(verdict: dict):
    """What a probe printed after MARK; ``ProbeError`` if it did not get that far."""
    for line in verdict.get("output", "").splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    said = "; ".join(c["message"] for c in verdict.get("checks", []))[:300]
    raise ProbeError(f"the probe printed nothing ({verdict['status']}: {said})")


def run_probe(grader, exercise, source: str, **limits) -> dict:
    """``source`` graded as a submission to ``exercise``: the real sandbox, as a job sees it."""
    from contracts.verdict import render

    if limits:
        exercise = dataclasses.replace(exercise, limits=dataclasses.replace(exercise.limits, **limits))
    return render(grader.grade(exercise, source.encode()), "en")


# ---------------------------------------------------------------- judging what a job saw


def outer_uids(uid_map: str) -> list[tuple[int, int]]:
    """(first, count) of the host uids behind the job's, from /proc/self/uid_map."""
    ranges = []
    for line in uid_map.splitlines():
        fields = line.split()
        if len(fields) == 3:
            ranges.append((int(fields[1]), int(fields[2])))
    return ranges


def judge_sandbox(facts: dict, gpu: int, expected_uuid: str | None) -> list[Result]:
    """The sandbox rows from the facts probe's view: ``gpu`` is the minor of the GPU the worker
    owns, ``expected_uuid`` that GPU's UUID as the host knows it (None: unknown)."""
    nodes = facts["nodes"]
    wanted = sorted({f"nvidia{gpu}", "nvidiactl", "nvidia-uvm"})
    rows = [
        Result(
            SANDBOX,
            f"only the assigned GPU's device nodes are visible (/dev/nvidia{gpu})",
            ok(nodes == wanted),
            ", ".join(nodes) or "none",
        )
    ]
    rows.append(
        Result(
            SANDBOX,
            "the seccomp filter is in force",
            ok(facts["seccomp"] == "2"),
            f"Seccomp: {facts['seccomp'] or '?'}",
        )
    )
    ranges = outer_uids(facts["uid_map"])
    root = not ranges or any(first == 0 for first, _ in ranges)
    rows.append(
        Result(
            SANDBOX,
            "the job's uid is not root outside the sandbox",
            ok(not root),
            "uid_map "
            + ("; ".join(" ".join(line.split()) for line in facts["uid_map"].splitlines()) or "empty"),
        )
    )
    uuids = [normal_uuid(u) for u in facts.get("uuids", [])]
    seen = f"{len(uuids)} device(s): {', '.join(uuids) or 'none'}"
    if expected_uuid is None:
        rows.append(
            Result(
                SANDBOX,
                "the job sees one GPU, the assigned one",
                "failed",
                f"{seen}; which GPU /dev/nvidia{gpu} is cannot be told here",
            )
        )
    else:
        rows.append(
            Result(
                SANDBOX,
                "the job sees one GPU, the assigned one",
                ok(uuids == [normal_uuid(expected_uuid)]),
                f"{seen}; /dev/nvidia{gpu} is {normal_uuid(expected_uuid)}",
            )
        )
    return rows


def judge_contexts(readings: list[dict[int, int]], parents: dict[int, int]) -> tuple[bool, str]:
    """Whether NVML showed the learner's code in a child with a context of its own: in one of
    ``readings`` (pid → device bytes, the worker's descendants only), the process holding the
    most (the context probe's) has a parent, its supervisor, that holds a context too."""
    if not readings:
        return False, "NVML listed no process of this worker's while the probe ran"
    for seen in readings:
        learner = max(seen, key=lambda pid: seen[pid])
        supervisor = parents.get(learner)
        if supervisor in seen:
            return True, (
                f"2 contexts: the learner's pid {learner} ({seen[learner] / 1024**2:,.0f} MiB, the "
                f"probe's {CONTEXT_PROBE_MIB} in it), its supervisor pid {supervisor} "
                f"({seen[supervisor] / 1024**2:,.0f} MiB)"
            )
    seen = max(readings, key=len)
    learner = max(seen, key=lambda pid: seen[pid])
    return False, (
        f"the probe's pid {learner} ({seen[learner] / 1024**2:,.0f} MiB) has no parent holding a "
        f"context (parent {parents.get(learner, '?')}; {len(seen)} process(es) listed): the "
        "learner's code runs in its supervisor"
    )


def judge_attacks(verdicts: dict[str, dict], after: dict) -> tuple[bool, str]:
    """Whether every attack on the supervisor got a verdict other than passed, and the correct
    loop graded next still passes."""
    held = all(v["status"] != "passed" for v in verdicts.values()) and after["status"] == "passed"
    seen = [
        f"{name}: {v['status']} in {v['metrics'].get('sandbox_ms', '?')} ms" for name, v in verdicts.items()
    ]
    return held, "; ".join([*seen, f"the correct loop next: {after['status']}"])


def judge_handoff(cuda_ms: list[float], cpu_ms: list[float]) -> tuple[bool, str]:
    """Whether CUDA's median hand-off → verdict is within ``HANDOFF_RATIO`` × the CPU's."""
    cuda, cpu = statistics.median(cuda_ms), statistics.median(cpu_ms)
    ratio = cuda / cpu
    return ratio <= HANDOFF_RATIO, (
        f"{cuda:,.0f} ms on CUDA, {cpu:,.0f} ms on the CPU: {ratio:.2f}× (medians of {len(cuda_ms)})"
    )


def normal_uuid(uuid: str) -> str:
    uuid = uuid.strip().lower()
    return uuid[4:] if uuid.startswith("gpu-") else uuid


def judge_memory_stop(verdict: dict, expected: str) -> tuple[bool, str]:
    """Whether a memory bomb was stopped with an error verdict whose checks say ``expected``."""
    messages = " ".join(c["message"] for c in verdict["checks"])
    stopped = verdict["status"] == "error" and expected in messages
    took = verdict["metrics"].get("sandbox_ms", 0) / 1000
    return stopped, f"{verdict['status']} after {took:.1f} s: {messages[:160]}"


def watch_contexts(grade: Callable[[], dict], every: float = 0.1):
    """``grade()`` in a thread while NVML's process list is read here: its verdict, each
    reading (pid → device bytes, this process's descendants only) and each listed pid's parent."""
    import threading

    import psutil

    from worker import nvml

    done: dict = {}

    def target() -> None:
        try:
            done["verdict"] = grade()
        except BaseException as exc:  # noqa: BLE001 (raised again below, in this thread)
            done["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    me = psutil.Process()
    readings: list[dict[int, int]] = []
    parents: dict[int, int] = {}
    while thread.is_alive():
        with contextlib.suppress(psutil.Error):
            mine = {child.pid for child in me.children(recursive=True)}
            seen = {pid: used for pid, used in nvml.processes().items() if pid in mine}
            for pid in seen:
                if pid not in parents:
                    with contextlib.suppress(psutil.Error):
                        parents[pid] = psutil.Process(pid).ppid()
            if seen:
                readings.append(seen)
        thread.join(every)
    if "error" in done:
        raise done["error"]
    return done["verdict"], readings, parents


def host_gpus(dev: str = "/dev") -> list[int]:
    """The minors of this host's GPU device nodes."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := re.fullmatch(r"nvidia(\d+)", name)))


def driver_gpus(root: str = "/proc/driver/nvidia/gpus") -> dict[int, str]:
    """Device minor -> GPU UUID, as the kernel driver lists them."""
    found = {}
    for info in sorted(Path(root).glob("*/information")):
        with contextlib.suppress(OSError, KeyError, ValueError):
            lines = info.read_text().splitlines()
            fields = dict(line.split(":", 1) for line in lines if ":" in line)
            found[int(fields["Device Minor"])] = fields["GPU UUID"].strip()
    return found


# ---------------------------------------------------------------- the report


MARKS = {"passed": "✓ passed", "failed": "✗ **failed**", "n/a": "— n/a"}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(about: dict[str, str], results: list[Result]) -> str:
    """docs/gpu.md: the machine, the verdict in one line, then each section's rows."""
    failed = [r for r in results if r.status == "failed"]
    checked = [r for r in results if r.status != "n/a"]
    if failed:
        summary = (
            f"**{len(failed)} of {len(checked)} checks failed**: "
            + "; ".join(f"{r.section} — {r.name}" for r in failed)
            + "."
        )
    else:
        summary = f"**All {len(checked)} checks passed.**"
    lines = [
        "# GPU check",
        "",
        "Written by `make gpu-check` (bench/gpu.py) on a machine with CUDA; run it there again "
        "to refresh this page. Each row is a check (✓/✗) or a figure measured on the way; "
        "`make gpu-check` exits non-zero when a row failed.",
        "",
        summary,
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        *[f"| {key} | {_cell(value)} |" for key, value in about.items()],
    ]
    for section in SECTIONS:
        rows = [r for r in results if r.section == section]
        if rows:
            lines += ["", f"## {section}", "", "| Check | Result | Measured |", "|---|---|---|"]
            lines += [f"| {_cell(r.name)} | {MARKS[r.status]} | {_cell(r.measured)} |" for r in rows]
    return "\n".join([*lines, "", *KIT_SECTION.splitlines(), ""])


KIT_SECTION = """## Running it on a lent machine

A lent GPU machine reaches no package registry and runs its own Python and torch, so the run
takes its kit along (bench/gpu_kit.py): bubblewrap and its libraries from Debian's packages, and
wheels of every package the project runs on but torch (the lock's versions, for that machine's
CPython). Here, then there (the device tool's `run`, carrying `.kit`):

    .venv/bin/python -m bench.gpu_kit build     # .kit/: bubblewrap, the wheels, manifest.json
    python3 -m bench.gpu_kit run                # there: $OUT/gpu.md (this page), $OUT/gpu-check.log

`run` unpacks the kit under /tmp/treino-kit only (bubblewrap named by `TREINO_BWRAP`, the wheels
on `PYTHONPATH`), prints what the machine offers a sandbox, grades one solution on the CPU in the
kit's bubblewrap, then runs `python -m bench.gpu` (`make gpu-check` without `make install`).
`python -m bench.gpu_kit rehearse` does the same here from a kit alone, in a venv of the system's
Python with torch only, the system's `/usr/bin/bwrap` replaced by a tripwire."""


# ---------------------------------------------------------------- running the checks

STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"gpu-check [{time.monotonic() - STARTED:5.0f} s] {message}", file=sys.stderr, flush=True)


Check = Callable[[], Iterable[Result]]


def run_checks(checks: list[tuple[str, str, Check]]) -> list[Result]:
    """Each (section, name, check) in turn; one that raises is one failed row saying why, and
    the rest still run."""
    results: list[Result] = []
    for section, name, check in checks:
        say(f"{section}: {name}")
        try:
            results += list(check())
        except Exception as exc:
            message = str(exc).strip().splitlines()
            results.append(
                Result(
                    section, name, "failed", f"{type(exc).__name__}: {message[0] if message else ''}"[:300]
                )
            )
    return results


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def _ms(samples: list[float]) -> str:
    return f"{statistics.median(samples):,.0f} ms"


class GpuCheck:
    """The checks of one run on CUDA; each method gives report rows."""

    def __init__(self, torch, start_up: dict[str, float]) -> None:
        from app.config import get_settings
        from app.lessons.course import load_course
        from worker import sandbox

        self.torch = torch
        self.start_up = start_up
        self.settings = get_settings()
        self.course = load_course(self.settings.lessons_dir)
        self.setup = sandbox.setup(self.settings.sandbox, self.settings.device)
        self.grader: Grader  # the CUDA grader with its warm pool, and the CPU's: while in_pool runs
        self.cpu_grader: Grader
        self.gpu = self.setup.gpu if self.setup.gpu is not None else sandbox.assigned_gpu()
        self.probe_exercise = self._exercise(PROBE_EXERCISE)
        self.properties = torch.cuda.get_device_properties(0)
        self.bf16 = torch.cuda.get_device_capability(0) >= (8, 0)
        self.facts: dict | None = None

    def _exercise(self, exercise_id: str) -> "Exercise":
        exercise = self.course.exercise(exercise_id)
        assert exercise is not None, f"the course has lost {exercise_id}"
        return exercise

    def about(self) -> dict[str, str]:
        from bench import machine

        torch, props = self.torch, self.properties
        about = machine.describe(self.setup.isolation, "cuda", POOL_SIZE, "not used")
        for key in ("postgresql", "warm pool", "torch", "device"):  # said better above
            about.pop(key)
        return {
            "card": f"{props.name}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 1024**3:,.1f} GiB, {props.multi_processor_count} SMs",
            "driver": driver_version(),
            "torch": f"{torch.__version__} (CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()})",
            "bubblewrap": bwrap_version(),
            "GPUs on the host": f"{len(host_gpus())}; this run's worker owns /dev/nvidia{self.gpu} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})",
            **about,
        }

    def checks(self) -> list[tuple[str, str, Check]]:
        return [
            (START_UP, "CUDA start-up in a fresh process", self.fresh_process),
            (START_UP, "sandbox warm-up, CUDA beside the CPU", self.warm_up),
            (START_UP, "CUDA after a fork of the template", self.after_fork),
            (SANDBOX, "in the warm pool", self.in_pool),
            (CLAIMS, "the claims that wait for a GPU", self.claims),
            (WEB, "a submission through the web and a GPU worker", self.end_to_end),
        ]

    # ------------------------------------------------------------ start-up

    def fresh_process(self) -> list[Result]:
        s = self.start_up
        return [
            Result(
                START_UP,
                "CUDA start-up in a fresh process (what a job would pay without a warm sandbox)",
                "passed",
                f"init {s['init_ms']:,.0f} ms · context and first allocation "
                f"{s['context_ms']:,.0f} ms · first kernel {s['kernel_ms']:,.1f} ms · first "
                f"matmul (cuBLAS) {s['matmul_ms']:,.0f} ms",
            )
        ]

    def warm_up(self, runs: int = 2) -> list[Result]:
        """Start → ready of a sandbox, CUDA and CPU in turn: what the warm pool hides."""
        from worker import sandbox

        took: dict[str, list[float]] = {"cuda": [], "cpu": []}
        for _ in range(runs):
            for device in took:
                box = sandbox.Sandbox(self.setup.isolation, device, self.gpu if device == "cuda" else None)
                try:
                    if not box.ready(sandbox.WARM_UP_SECONDS):
                        raise ProbeError(f"a {device} sandbox did not warm up")
                    took[device].append(time.monotonic() - box.started)
                finally:
                    box.close()
        cuda, cpu = statistics.median(took["cuda"]), statistics.median(took["cpu"])
        return [
            Result(
                START_UP,
                "CUDA start-up per sandbox, paid in its warm-up (off the learner's clock)",
                "passed",
                f"warm-up {cuda:.1f} s on CUDA, {cpu:.1f} s on the CPU: CUDA adds "
                f"{cuda - cpu:.1f} s (median of {runs})",
            )
        ]

    def after_fork(self, runs: int = 5) -> list[Result]:
        """Jobs forked from a template (worker/forkserver.py), which never touches CUDA: hand-off
        → verdict of the probe exercise's solution, CUDA beside the CPU, each from a fork server
        of its own; then the learner's first kernel, whose context was made before the request."""
        from worker import forkserver, sandbox
        from worker.grading import Grader

        exercise = self.probe_exercise
        code = (Path(exercise.path) / "solution.py").read_bytes()
        took: dict[str, list[float]] = {"cuda": [], "cpu": []}
        facts = {}
        for device in took:
            setup = self.setup if device == "cuda" else sandbox.Setup(self.setup.isolation, "cpu")
            server = forkserver.ForkServer(setup.isolation, device, setup.gpu)
            with Grader(setup, server) as grader:
                for _ in range(runs + 1):  # the first warms the template's pages up: not counted
                    started = time.monotonic()
                    verdict = run_probe(grader, exercise, code.decode())
                    if verdict["status"] != "passed":
                        raise ProbeError(f"the solution, forked on {device}: {verdict['status']}")
                    took[device].append((time.monotonic() - started) * 1000)
                if device == "cuda":
                    facts = probe_facts(run_probe(grader, exercise, FACTS_PROBE))
        held, seen = judge_handoff(took["cuda"][1:], took["cpu"][1:])
        first = facts.get("first_kernel_ms")
        return [
            Result(
                START_UP,
                f"after a fork of the template: hand-off → verdict on CUDA within {HANDOFF_RATIO}× "
                f"the CPU's (`{PROBE_EXERCISE}`'s solution)",
                ok(held),
                seen,
            ),
            Result(
                START_UP,
                f"after a fork of the template: the context was made before the request (the "
                f"learner's first kernel under {FIRST_KERNEL_MS} ms)",
                ok(facts.get("cuda") is True and first is not None and first < FIRST_KERNEL_MS),
                f"first kernel {first:,.1f} ms" if first is not None else f"no kernel ran ({facts})",
            ),
        ]

    # ------------------------------------------------------------ with a warm pool

    def in_pool(self) -> list[Result]:
        """Everything that runs jobs, in one warm pool bound to the GPU."""
        from worker import sandbox
        from worker.grading import Grader

        cpu = sandbox.Setup(self.setup.isolation, "cpu")
        with (
            Grader.running(self.settings, POOL_SIZE, setup=self.setup) as self.grader,
            Grader.running(self.settings, 0, setup=cpu) as self.cpu_grader,
        ):
            return run_checks(
                [
                    (SANDBOX, "what a job sees", self.sandbox_view),
                    (SANDBOX, "the child owns its context", self.contexts),
                    (SANDBOX, "a child that signals its supervisor", self.attacks),
                    (SANDBOX, "memory limits", self.memory_limits),
                    (START_UP, "CUDA start-up per job in the warm pool", self.per_job),
                    (EXERCISES, "every exercise", self.exercises),
                    (FIGURES, "each solution, CUDA beside the CPU", self.solutions),
                    (FIGURES, "lesson 4's model, one step", self.figures),
                ]
            )

    def on_both(self, exercise, code: bytes) -> dict[str, dict]:
        """``code`` graded on the GPU and on the CPU (the same sandbox kind, no GPU bound)."""
        from contracts.verdict import render

        return {
            "cuda": render(self.grader.grade(exercise, code), "en"),
            "cpu": render(self.cpu_grader.grade(exercise, code), "en"),
        }

    def sandbox_view(self) -> list[Result]:
        from worker import sandbox

        rows = [
            Result(
                SANDBOX,
                "learner code runs in bubblewrap",
                ok(self.setup.isolation == "bwrap"),
                self.setup.isolation
                if self.setup.isolation == "bwrap"
                else f"process only: {sandbox.bwrap_problem()}",
            )
        ]
        self.facts = probe_facts(run_probe(self.grader, self.probe_exercise, FACTS_PROBE))
        launcher = str(self.properties.uuid)  # CUDA's device 0 here, under CUDA_VISIBLE_DEVICES
        minor = driver_gpus().get(self.gpu)
        if minor is not None and normal_uuid(minor) != normal_uuid(launcher):
            rows.append(
                Result(
                    SANDBOX,
                    "CUDA_VISIBLE_DEVICES and the device nodes agree",
                    "failed",
                    f"CUDA's device is {normal_uuid(launcher)}, /dev/nvidia{self.gpu} is "
                    f"{normal_uuid(minor)}",
                )
            )
        elif minor is not None:
            rows.append(
                Result(
                    SANDBOX,
                    "CUDA_VISIBLE_DEVICES and the device nodes agree",
                    "passed",
                    f"both {normal_uuid(minor)} ({len(host_gpus())} GPU(s) on the host)",
                )
            )
        expected = minor or (launcher if len(host_gpus()) == 1 else None)
        return rows + judge_sandbox(self.facts, self.gpu, expected)

    def contexts(self) -> list[Result]:
        """Under each start, the context probe graded while NVML's process list is read here."""
        from worker import forkserver
        from worker.grading import Grader

        rows = []
        for start in ("fork", "exec"):
            with Grader(self.setup, forkserver.runner(start, self.setup, 1)) as grader:
                start = "fork" if isinstance(grader.pool, forkserver.ForkServer) else "exec"
                probe = functools.partial(run_probe, grader, self.probe_exercise, context_source())
                verdict, readings, parents = watch_contexts(probe)
            held, seen = judge_contexts(readings, parents)
            rows.append(
                Result(
                    SANDBOX,
                    f"the learner's code runs in a child with a CUDA context of its own: NVML lists "
                    f"it and its supervisor ({start} start)",
                    ok(held and verdict["status"] != "error"),
                    f"{seen}; the probe: {verdict['status']}",
                )
            )
        return rows

    def attacks(self) -> list[Result]:
        """A correct loop that first signals its supervisor, once per signal in ``ATTACKS``."""
        solution = (Path(self.probe_exercise.path) / "solution.py").read_text()
        verdicts = {
            name: run_probe(self.grader, self.probe_exercise, attack_source(solution, name), wall_seconds=30)
            for name in ATTACKS
        }
        held, seen = judge_attacks(verdicts, run_probe(self.grader, self.probe_exercise, solution))
        return [
            Result(
                SANDBOX,
                f"a child that stops or signals its supervisor ({', '.join(ATTACKS)}) does not pass "
                "on CUDA, and the next job does",
                ok(held),
                seen,
            )
        ]

    def memory_limits(self) -> list[Result]:
        from worker import sandbox

        verdict = run_probe(self.grader, self.probe_exercise, GPU_MEMORY_BOMB, wall_seconds=120)
        stopped, seen = judge_memory_stop(verdict, "OutOfMemoryError")
        rows = [
            Result(
                SANDBOX,
                "a job allocating past the GPU's memory is stopped with a clear verdict",
                ok(stopped),
                seen,
            )
        ]
        after = probe_facts(run_probe(self.grader, self.probe_exercise, FACTS_PROBE))
        before = self.facts or after
        back = after["free_bytes"] >= before["free_bytes"] - 0.05 * before["total_bytes"]
        rows.append(
            Result(
                SANDBOX,
                "the next job finds the GPU's memory free again",
                ok(back),
                f"free {after['free_bytes'] / 1024**3:,.1f} of "
                f"{after['total_bytes'] / 1024**3:,.1f} GiB (before the bomb: "
                f"{before['free_bytes'] / 1024**3:,.1f})",
            )
        )
        how = "its cgroup" if sandbox.Cgroup.available() else "the worker's memory watch (no cgroup here)"
        verdict = run_probe(self.grader, self.probe_exercise, HOST_MEMORY_BOMB)
        stopped, seen = judge_memory_stop(verdict, "(memory)")  # the OOM kill or the watch, named
        rows.append(
            Result(
                SANDBOX,
                f"a job allocating past its host memory limit "
                f"({self.probe_exercise.limits.memory_mb} MiB) is stopped by {how} "
                "with a clear verdict",
                ok(stopped),
                seen,
            )
        )
        return rows

    def per_job(self) -> list[Result]:
        facts = self.facts or probe_facts(run_probe(self.grader, self.probe_exercise, FACTS_PROBE))
        first = facts["first_kernel_ms"]
        code = (Path(self.probe_exercise.path) / "solution.py").read_bytes()
        verdicts = self.on_both(self.probe_exercise, code)
        return [
            Result(
                START_UP,
                f"CUDA start-up per job in the warm pool (the context was made in the "
                f"warm-up: first kernel under {FIRST_KERNEL_MS} ms)",
                ok(first < FIRST_KERNEL_MS),
                f"first kernel in the job {first:,.1f} ms",
            ),
            Result(
                START_UP,
                f"hand-off → verdict in the warm pool, `{PROBE_EXERCISE}`'s solution",
                ok(all(v["status"] == "passed" for v in verdicts.values())),
                " · ".join(
                    f"{d}: {v['status']}, {v['metrics'].get('sandbox_ms', '?')} ms in the sandbox"
                    for d, v in verdicts.items()
                ),
            ),
        ]

    def exercises(self) -> list[Result]:
        rows = []
        for exercise in self.course.exercises:
            variants = [exercise]
            dtype = exercise.check_params.get("amp_dtype")
            if dtype is not None and dtype != "bfloat16":
                if self.bf16:
                    variants.append(
                        dataclasses.replace(
                            exercise, check_params={**exercise.check_params, "amp_dtype": "bfloat16"}
                        )
                    )
                else:
                    rows.append(
                        Result(
                            EXERCISES,
                            f"`{exercise.id}`, autocast bfloat16",
                            "n/a",
                            "compute capability below 8.0: no bfloat16",
                        )
                    )
            for variant in variants:
                name = f"`{variant.id}`"
                if "amp_dtype" in variant.check_params:
                    name += f", autocast {variant.check_params['amp_dtype']}"
                say(f"  {name}")
                started = time.monotonic()
                problems = self.grader.check_exercise(variant)
                mistakes = len(list((Path(variant.path) / "mistakes").glob("*.py")))
                measured = (
                    "; ".join(problems)
                    if problems
                    else f"solution passes, {mistakes} of {mistakes} mistakes named"
                )
                rows.append(
                    Result(
                        EXERCISES, name, ok(not problems), f"{measured} ({time.monotonic() - started:.1f} s)"
                    )
                )
        return rows

    def solutions(self) -> list[Result]:
        rows = []
        for exercise in self.course.exercises:
            code = (Path(exercise.path) / "solution.py").read_bytes()
            verdicts = self.on_both(exercise, code)
            rows.append(
                Result(
                    FIGURES,
                    f"`{exercise.id}`, its solution",
                    ok(all(v["status"] == "passed" for v in verdicts.values())),
                    compare_metrics(verdicts["cuda"], verdicts["cpu"]),
                )
            )
        return rows

    def claims(self) -> list[Result]:
        """Each `device: cuda` claim of lessons/*/claims.yaml, proven by its script on this GPU
        (`treino lessons check` proves the CPU ones)."""
        from app.lessons.proofs import prove

        return claims_rows(prove([c for c in self.course.claims if c.device == "cuda"]))

    def figures(self) -> list[Result]:
        params = self._exercise(FIGURES_EXERCISE).check_params
        configs = [
            ("cpu", "float64", None),
            ("cuda", "float64", None),
            ("cuda", "float32", None),
            ("cuda", "float32", "float16"),
        ]
        configs += [("cuda", "float32", "bfloat16")] if self.bf16 else []
        found = probe_facts(run_probe(self.grader, self.probe_exercise, figures_source(params, configs)))
        return figures_rows(found, params, self.bf16)

    # ------------------------------------------------------------ the web

    def end_to_end(self, runs: int = 3) -> list[Result]:
        from sqlalchemy import select

        from app.submissions.models import Submission
        from bench import traffic
        from bench.stack import Stack

        code = (Path(self.probe_exercise.path) / "solution.py").read_text()
        with Stack("sqlite", self.settings.pool_size) as stack:
            stack.add_worker()
            times = traffic.end_to_end(stack, PROBE_EXERCISE, code, runs)
            engine = stack.database()
            try:
                with engine.connect() as conn:
                    verdicts = conn.execute(select(Submission.verdict)).scalars().all()
            finally:
                engine.dispose()
        seen = sorted({f"{v['metrics'].get('device')} ({v['metrics'].get('isolation')})" for v in verdicts})
        on_gpu = all(v["metrics"].get("device") == "cuda" for v in verdicts) and verdicts
        return [
            Result(
                WEB,
                "a submission through the web (SQLite) and a `treino worker` on the GPU",
                ok(bool(on_gpu)),
                f"{len(verdicts)} passed, graded on {', '.join(seen)}; submit → verdict "
                f"{_ms(times)} (median of {runs}, warm pool)",
            )
        ]


FIGURE_KEYS = (
    "peak_activation_bytes",
    "reference_peak_activation_bytes",
    "peak_live_bytes",
    "naive_peak_live_bytes",
    "trajectory_error",
    "speedup",
    "harness_run_ms",
    "sandbox_ms",
)


def compare_metrics(cuda: dict, cpu: dict) -> str:
    """The figures a learner reads in the two verdicts, CUDA's first."""
    parts = [f"{cuda['status']} on CUDA, {cpu['status']} on the CPU"]
    for key in FIGURE_KEYS:
        a, b = cuda["metrics"].get(key), cpu["metrics"].get(key)
        if a is None and b is None:
            continue
        parts.append(f"{key} {a} vs {b}" if a != b else f"{key} {a} on both")
    return " · ".join(parts)


def claims_rows(proven: "list[Proven]") -> list[Result]:
    """One row per CUDA claim: the card it is taught in, and how its proof went."""
    return [
        Result(
            CLAIMS,
            f"{p.claim.card.lesson}/{p.claim.id} ({p.claim.proof.name}): {p.claim.text}",
            ok(p.ok),
            f"{p.seconds:.1f} s" if p.ok else p.error,
        )
        for p in proven
    ]


def figures_rows(found: list[dict], params: dict, bf16: bool) -> list[Result]:
    rows = []
    what = (
        f"batch {params['batch_size']}, width {params['width']}, {params['blocks']}×{params['depth']} layers"
    )
    cpu = next((f for f in found if f["device"] == "cpu"), None)
    for f in found:
        name = f"lesson 4's model ({what}), {f['dtype']}" + (f", autocast {f['amp']}" if f["amp"] else "")
        name += " on the CPU" if f["device"] == "cpu" else " on CUDA"
        parts = [f"saved for backward {_kib(f['saved_bytes'])}"]
        if "cuda_peak_bytes" in f:
            parts.append(f"max_memory_allocated {_kib(f['cuda_peak_bytes'])} above the resting weights")
        synchronised = " (synchronised)" if f["device"] == "cuda" else ""
        parts.append(f"{f['ms_per_step']:,.2f} ms/step{synchronised}")
        if cpu is not None and f is not cpu and f["dtype"] == cpu["dtype"]:
            parts.append(f"{cpu['ms_per_step'] / max(f['ms_per_step'], 1e-6):,.1f}× the CPU's speed")
        rows.append(Result(FIGURES, name, "passed", " · ".join(parts)))
    if not bf16:
        rows.append(
            Result(
                FIGURES,
                "lesson 4's model, autocast bfloat16 on CUDA",
                "n/a",
                "compute capability below 8.0: no bfloat16",
            )
        )
    return rows


# ---------------------------------------------------------------- the machine


def bwrap_version() -> str:
    """Which bubblewrap the sandboxes run (``TREINO_BWRAP``: the kit's, bench/gpu_kit.py)."""
    import subprocess

    from worker.sandbox import BWRAP

    try:
        done = subprocess.run([BWRAP, "--version"], capture_output=True, text=True, timeout=10)
    except OSError as exc:
        return f"{BWRAP}: {exc.strerror}"
    return f"{BWRAP}: {done.stdout.strip() or done.stderr.strip()}"


def driver_version() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown (/proc/driver/nvidia/version unreadable)"
    m = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", text)
    return m.group(1) if m else text.splitlines()[0].strip()


def bind_one_gpu() -> None:
    """Before CUDA starts in this process: with several GPUs and none chosen, the worker owns
    the last one (not 0, so that a mix-up of CUDA's indices and the device minors shows)."""
    minors = host_gpus()
    if len(minors) > 1 and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(minors[-1])


def import_torch():
    from worker.harness import quiet

    with quiet.ignored():
        import torch
    return torch


def no_cuda(torch) -> str | None:
    """Why this machine cannot run the check, in one line; None when it can."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        nodes = host_gpus()
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
            f"({len(nodes)} /dev/nvidiaN node(s) here)"
        )
    return None


def measure_start_up(torch) -> dict[str, float]:
    """This process's first CUDA steps, each timed (before anything else touched CUDA)."""
    times = {}
    started = time.perf_counter()
    torch.cuda.init()
    times["init_ms"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    x = torch.zeros(256, 256, device="cuda")
    torch.cuda.synchronize()
    times["context_ms"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    x.add_(1)
    torch.cuda.synchronize()
    times["kernel_ms"] = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    x @ x
    torch.cuda.synchronize()
    times["matmul_ms"] = (time.perf_counter() - started) * 1000
    return times


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # this run's clock (main may be called in a long-lived process)
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=ROOT / "docs" / "gpu.md", help="where the report goes ('-': nowhere)"
    )
    parser.add_argument(
        "--only", metavar="TEXT", help="run only the checks whose name holds TEXT (while developing)"
    )
    args = parser.parse_args(argv)
    bind_one_gpu()
    torch = import_torch()
    reason = no_cuda(torch)
    if reason is not None:
        shown = args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output
        print(f"no CUDA: {reason}; nothing to check here, {shown} left as it is")
        return 0
    from worker.sandbox import SandboxUnavailable

    start_up = measure_start_up(torch)
    os.environ["TREINO_DEVICE"] = "cuda"  # every sandbox, the references, the web's worker
    try:
        check = GpuCheck(torch, start_up)
    except SandboxUnavailable as exc:  # e.g. TREINO_SANDBOX=bwrap without a working bwrap
        print(f"gpu-check: sandbox: {exc}", file=sys.stderr)
        return 1
    about = check.about()
    say(f"{check.properties.name}, /dev/nvidia{check.gpu}, sandbox {check.setup.isolation}")
    results = run_checks([c for c in check.checks() if args.only is None or args.only in c[1]])
    took = time.monotonic() - started
    results.append(
        Result(
            RUN,
            f"the whole check within {LIMIT_SECONDS // 60} minutes",
            ok(took <= LIMIT_SECONDS),
            f"{took / 60:.1f} min",
        )
    )
    about["check took"] = f"{took / 60:.1f} min"
    text = render(about, results)
    print(text)
    if str(args.output) != "-":
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        say(f"written to {args.output}")
    failed = [r for r in results if r.status == "failed"]
    say(f"{len(failed)} failed" if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
