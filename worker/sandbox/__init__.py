"""The one launcher of learner code: ``treino check`` and the queue worker both use it.

A ``Sandbox`` is single-use: started, it warms up (the harness imports torch and, on a GPU,
creates the CUDA context), then waits for one job; ``run`` hands the job over, waits under the
job's wall-clock limit until the harness says the trace is written (or the sandbox ends), kills
the whole tree and reads back the trace. The dead tree is reaped and its cgroup removed in the
background (``reap_all`` waits for that): a torch process takes tens of milliseconds to die,
which no learner needs to wait for. ``worker.pool`` keeps a few warm ones and runs every job.
The same launcher starts a fork server's template (``Sandbox(template=True)``): one sandbox
whose jobs are forks that enter sandboxes of their own (``worker.forkserver``); the request,
the wait for a job's end and the reading of its result (``job.request``, ``watch.wait_for_end``,
``job.result``) are shared by both.

Two kinds, chosen by ``TREINO_SANDBOX`` (``setup()``):

- ``bwrap``: bubblewrap, itself started with a scrubbed environment (its PID 1 keeps the
  launcher's), never as host root: a root worker gives each sandbox a uid of its own from
  ``SANDBOX_UIDS`` (``Identity``), mapped onto itself. New user, PID, network (only ``lo``), IPC,
  UTS and cgroup namespaces; the seccomp filter of ``worker.seccomp``; a read-only view of the
  interpreter, the venv and system libraries only (never the repository, ./var or lessons/);
  size-capped tmpfs for the work dir, /tmp and /dev/shm; fresh /proc with the host's knobs
  read-only or hidden, a minimal /dev (plus the assigned GPU's nodes); a new session keyring;
  dies with its parent. docs/security.md says what each layer stops.
- ``process``: a child process with the same environment, rlimits and session, and nothing
  else: it sees the filesystem and the network the worker sees. For laptops without bwrap.

Both get rlimits (CPU, file size, open files, no core) and, where the host lets us create
cgroups, a memory, pids and CPU cgroup that is also swept at the end; without one, the worker
sums the memory of the job's tree itself while it waits (and on a GPU, always adds the device
memory NVML reports, which no cgroup counts).

The worker never opens a path the sandbox could have touched: the request goes in over a
socket, the trace and the output come back in memory files it created itself, and it is not
dumpable, nor is any process of ours that holds them (a warm sandbox, a template and its forks,
the supervisor): a job of the same uid cannot open them through ``/proc/<pid>/fd``. The trace
file and the done pipe are made at hand-off and sent with the request on a channel the job's
harness made once it was ready (``job``): nothing that ran before holds them. The trace is read
only once the supervisor said ``D`` after writing it.

The package, by concern: ``host`` (what of the host a sandbox sees), ``identity`` (its host
uid), ``bwrap`` (bubblewrap's command line), ``cgroup``, ``launcher`` (``Sandbox``), ``job``
(``Job``, the one job handle both starts give: a ``Sandbox`` and a fork server's ``ForkedJob``
are each one; the hand-off, the request and the result), ``watch`` (the wait for a job's end),
``reaper`` (closing used ones); choosing the sandbox is here.
"""

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
from typing import Literal

from contracts.limits import Limits
from worker import seccomp
from worker.sandbox.bwrap import (
    BWRAP,
    DEVICES,
    JOB_TMPFS,
    PROC_HIDDEN,
    PROC_READ_ONLY,
    driver_libraries,
    run_isolated,
    template_config,
    under_job_tmpfs,
)
from worker.sandbox.bwrap import bwrap_args as _bwrap_args
from worker.sandbox.bwrap import gpu_args as _gpu_args
from worker.sandbox.cgroup import CPU_PERIOD_US, PIDS, Cgroup
from worker.sandbox.host import (
    HARNESS,
    HARNESS_PACKAGE,
    HARNESS_ROOT,
    TMPFS_BYTES,
    SandboxUnavailable,
    Setup,
    harness_command,
)
from worker.sandbox.host import environment as _environment
from worker.sandbox.identity import SANDBOX_UIDS, UID_LOCKS, Identity, new_session_keyring
from worker.sandbox.job import (
    INCOMPLETE_TRACE,
    INVALID_TRACE,
    LIMIT_CAUSES,
    SANDBOX_START,
    TRACE_LIMIT,
    Ending,
    Handoff,
    Job,
    Result,
    channel_maker,
    descends,
    hand_over,
    receive_word,
    request,
    result,
)
from worker.sandbox.launcher import CPU_CEILING, FILE_LIMIT, OPEN_FILES, WARM_UP_SECONDS, Sandbox
from worker.sandbox.reaper import Used, _reap, reap_all, release
from worker.sandbox.watch import PAGE, WATCH_SECONDS, Cancel, tree_memory, wait_for_end

__all__ = [
    "BWRAP", "CPU_CEILING", "CPU_PERIOD_US", "DEVICES", "FILE_LIMIT", "HARNESS", "HARNESS_PACKAGE",
    "HARNESS_ROOT", "INCOMPLETE_TRACE", "INVALID_TRACE", "JOB_TMPFS", "LIMIT_CAUSES", "OPEN_FILES",
    "PAGE", "PIDS", "PROC_HIDDEN",
    "PROC_READ_ONLY", "SANDBOX_START", "SANDBOX_UIDS", "TMPFS_BYTES", "TRACE_LIMIT", "UID_LOCKS",
    "WARM_UP_SECONDS", "WATCH_SECONDS", "Cancel", "Cgroup", "Ending", "Handoff", "Identity", "Job",
    "Limits", "Result",
    "Sandbox", "SandboxUnavailable", "Setup", "Used", "_bwrap_args", "_environment", "_gpu_args",
    "_reap", "assigned_gpu", "bwrap_problem", "channel_maker", "descends", "driver_libraries",
    "hand_over", "harness_command", "isolation", "new_session_keyring", "reap_all", "receive_word",
    "release", "request",
    "resolve_device", "result", "run_isolated", "setup", "template_config",
    "tree_memory", "under_job_tmpfs", "wait_for_end",
]  # fmt: skip

log = logging.getLogger("treino.sandbox")


# the choice is made here, not in a module of its own: ``isolation`` and ``setup`` look
# ``bwrap_problem`` up in this namespace, where a test replaces it


@functools.lru_cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run sandboxes here, or None; probed once per process, through the
    same launcher (uid, private view, seccomp filter) that every sandbox gets."""
    if shutil.which(BWRAP) is None:
        return f"bubblewrap ({BWRAP}) is not installed"
    try:
        seccomp.program()
    except seccomp.Unavailable as exc:
        return str(exc)
    try:
        done = run_isolated([sys.executable, "-I", "-S", "-c", "pass"], timeout=30)
    except (OSError, subprocess.SubprocessError, SandboxUnavailable) as exc:
        return f"bwrap did not start: {exc}"
    if done.returncode != 0:
        reason = done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"]
        return f"bwrap cannot create its namespaces: {reason[-1]}"
    return None


def isolation(mode: str = "auto") -> Literal["bwrap", "process"]:
    """``bwrap`` when learner code is isolated by bubblewrap, ``process`` when it is not.

    ``mode`` is the setting: ``auto`` takes bwrap when it works, ``process`` never does, and
    ``bwrap`` raises ``SandboxUnavailable`` when it cannot run.
    """
    if mode == "process":
        return "process"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "bwrap":
        raise SandboxUnavailable(f"TREINO_SANDBOX=bwrap but {problem}")
    return "process"


def resolve_device(mode: str = "auto") -> Literal["cpu", "cuda"]:
    """``cpu`` or ``cuda`` for the setting ``auto|cpu|cuda``; ``cuda`` must be there."""
    if mode == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if mode == "cuda":
        raise SandboxUnavailable("TREINO_DEVICE=cuda but torch sees no CUDA device")
    return "cpu"


def assigned_gpu(dev: str = "/dev") -> int:
    """The minor number of the one GPU this worker owns: CUDA_VISIBLE_DEVICES' single index,
    else the only /dev/nvidiaN there is (a container given one GPU)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible:
        if not re.fullmatch(r"\d+", visible):
            raise SandboxUnavailable(
                f"a worker owns one GPU: set CUDA_VISIBLE_DEVICES to one device number (it is {visible!r})"
            )
        return int(visible)
    nodes = sorted(int(m.group(1)) for name in os.listdir(dev) if (m := re.fullmatch(r"nvidia(\d+)", name)))
    if len(nodes) != 1:
        raise SandboxUnavailable(
            f"{len(nodes)} GPUs visible: set CUDA_VISIBLE_DEVICES to the one this worker owns"
        )
    return nodes[0]


def setup(sandbox: str = "auto", device: str = "auto") -> Setup:
    """The sandbox and device to run learner code with, from the settings' ``sandbox`` and
    ``device`` choices; raises ``SandboxUnavailable`` (say it in one line and stop) when a
    mandatory one is missing."""
    kind = isolation(sandbox)
    chosen = resolve_device(device)
    gpu = assigned_gpu() if chosen == "cuda" and kind == "bwrap" else None
    if kind == "process":
        log.warning(
            "sandbox: process only, learner code is NOT isolated (%s)",
            "TREINO_SANDBOX=process" if sandbox == "process" else bwrap_problem(),
        )
    else:
        log.info("sandbox: bwrap; device: %s%s", chosen, "" if gpu is None else f" (/dev/nvidia{gpu})")
    return Setup(kind, chosen, gpu)
