"""The one launcher of learner code: ``treino check`` and the queue worker both use it.

A ``Sandbox`` is single-use: started, it warms up (the harness imports torch and, on a GPU,
creates the CUDA context), then waits for one job; ``run`` hands the job over, waits under the
job's wall-clock limit until the harness says the trace is written (or the sandbox ends), kills
the whole tree and reads back the trace. The dead tree is reaped and its cgroup removed in the
background (``reap_all`` waits for that): a torch process takes tens of milliseconds to die,
which no learner needs to wait for. ``worker.pool`` keeps a few warm ones and runs every job.
The same launcher starts a fork server's template (``Sandbox(template=True)``): one sandbox
whose jobs are forks that enter sandboxes of their own (``worker.forkserver``); the request,
the wait for a job's end and the reading of its result (``request``, ``wait_for_end``,
``outcome``) are shared by both.

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
is read only once the supervisor said ``D`` after writing it.
"""

import contextlib
import ctypes
import fcntl
import functools
import json
import logging
import os
import random
import re
import resource
import secrets
import select
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from app.lessons.content import Limits
from worker import nvml, seccomp
from worker.harness import linux, trace_schema

log = logging.getLogger("treino.sandbox")

HARNESS = Path(__file__).with_name("harness")
TRACE_LIMIT = trace_schema.MAX_BYTES
FILE_LIMIT = 16 * 1024 * 1024  # any file the child writes (its output, the trace)
OPEN_FILES = 256  # torch opens a few dozen shared libraries while importing
CPU_PERIOD_US = 100_000  # cgroup cpu quota = period: at most one CPU for a sandbox's whole tree
PIDS = 256  # processes and threads per sandbox (pids cgroup; RLIMIT_NPROC without one)
TMPFS_BYTES = 64 * 1024 * 1024  # each of /job, /tmp, /dev/shm
WARM_UP_SECONDS = 180  # importing torch on a slow, busy CPU; not part of any job's limit
CPU_CEILING = 600 + WARM_UP_SECONDS  # hard RLIMIT_CPU; the harness lowers it for the job
# Per-sandbox host uids when the worker runs as root (isolate-style): a bwrap started by root
# would map the job to host uid 0. Each sandbox takes one uid of the range for its life (an
# flock under UID_LOCKS, so several workers on one host never share one); docs/security.md.
SANDBOX_UIDS = range(60000, 61000)
UID_LOCKS = Path("/run/treino-sandbox")
BWRAP = "bwrap"
# /proc entries that are host knobs or host information: read-only, or hidden behind /dev/null
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_HIDDEN = (
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
)
DEVICES = ("null", "zero", "full", "random", "urandom")


class SandboxUnavailable(RuntimeError):
    """The configured sandbox or device cannot be used here; the message says why, in one line."""


@dataclass(frozen=True)
class Result:
    status: Literal["ok", "timeout", "crashed"]
    trace: dict | None  # the harness's trace; None unless status is "ok"
    wall_ms: int  # from hand-off to the job's end (its harness said done, or it ended): no warm-up
    output: str  # what reached the process's own stdout/stderr (capped)
    returncode: int | None
    reason: str = ""  # for "crashed": a short machine-readable cause
    start_ms: int = 0  # a forked job's: from asking its template for it to its sandbox being ready


@dataclass(frozen=True)
class Setup:
    """What this process runs learner code with."""

    isolation: Literal["bwrap", "process"]
    device: Literal["cpu", "cuda"]
    gpu: int | None = None  # the /dev/nvidiaN bound into bwrap sandboxes on CUDA


# ---------------------------------------------------------------- choosing the sandbox


@functools.lru_cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run sandboxes here, or None; probed once per process, through the
    same launcher (uid, private view, seccomp filter) that every sandbox gets."""
    if shutil.which(BWRAP) is None:
        return "bubblewrap (bwrap) is not installed"
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


def _enter(identity: "Identity") -> None:
    """Between fork and exec of a sandbox's launcher: its uid, then a keyring of its own."""
    identity.enter()
    new_session_keyring()


def run_isolated(command: list[str], timeout: float, forks: bool = False) -> subprocess.CompletedProcess:
    """``command`` under bwrap on the CPU, as a sandbox would run it (uid, view, filter, scrubbed
    environment), without the harness: the start-up probes and ``bench/sandbox.py``. ``forks``:
    as a fork-server template runs (see ``_bwrap_args``)."""
    identity = Identity()
    filter_fd = seccomp.fd(seccomp.TEMPLATE_ALLOWS if forks else ())
    try:
        return subprocess.run(
            [*_bwrap_args("cpu", None, identity.uid, filter_fd, forks), *command],
            env=_environment("/job"),
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            pass_fds=(filter_fd,),
            preexec_fn=functools.partial(_enter, identity),
        )
    finally:
        os.close(filter_fd)
        identity.release()


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


# ---------------------------------------------------------------- building the sandbox


def _environment(home: str) -> dict[str, str]:
    """The whole environment of the sandbox, and of bwrap itself: nothing of the worker's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": f"{home}/tmp",
        "USER": "sandbox",  # getpass.getuser() without a passwd file
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _readonly_paths() -> list[str]:
    """What Python and torch need: the interpreter's prefix, the venv, the system libraries."""
    paths = []
    for prefix in (sys.base_prefix, sys.prefix):
        if prefix in ("/", "/usr"):  # a system Python: its stdlib is under /usr/lib
            paths.append(os.path.realpath(sys.executable))
        elif prefix not in paths:
            paths.append(prefix)
    paths += [
        p for p in ("/usr/lib", "/usr/lib64", "/usr/lib32") if os.path.isdir(p) and not os.path.islink(p)
    ]
    paths.append("/etc/ld.so.cache")
    return paths


def driver_libraries(ldconfig: str) -> list[str]:
    """The NVIDIA driver's user-space libraries listed by ``ldconfig -p`` (64-bit only)."""
    found = []
    for line in ldconfig.splitlines():
        m = re.match(r"\s*(lib(?:cuda|nvidia-[\w.-]+?)\.so[.\d]*) \((.*?)\) => (\S+)", line)
        if m and "x86-64" in m.group(2):
            found.append(m.group(3))
    return sorted(set(found))


def _gpu_args(gpu: int, dev: str = "/dev", ldconfig: str | None = None) -> list[str]:
    """The assigned GPU's device nodes and the driver libraries not already visible.

    ``/dev/nvidia-uvm-tools`` (profiling) and the other GPUs' nodes stay out."""
    args = []
    for name in (f"nvidia{gpu}", "nvidiactl", "nvidia-uvm"):
        node = os.path.join(dev, name)
        if not os.path.exists(node):
            raise SandboxUnavailable(f"{node} is missing")
        args += ["--dev-bind", node, f"/dev/{name}"]
    if ldconfig is None:
        ldconfig = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    seen = tuple(p + "/" for p in _readonly_paths())
    for lib in driver_libraries(ldconfig):
        for path in {lib, os.path.realpath(lib)}:
            if not path.startswith(seen):
                args += ["--ro-bind", path, path]
    return [*args, "--ro-bind-try", "/sys", "/sys"]  # NVML and the driver read topology there


def _bwrap_args(device: str, gpu: int | None, uid: int, seccomp_fd: int, forks: bool = False) -> list[str]:
    """bwrap's command line. ``uid`` is the job's host uid and its uid inside too: mapped onto
    itself, with no intermediate namespace (bwrap nests one for ``--dev``, whose own root would
    then show in the job's uid_map), so ``/proc/self/uid_map`` names the real outer uid.

    ``forks``: for a fork-server template (``worker.forkserver``), whose jobs make namespaces
    of their own: no ``--disable-userns``, and a plain /proc (the kernel refuses a new /proc
    where the one in view has locked over-mounts; each job masks its own fresh one the same
    way, ``PROC_READ_ONLY`` and ``PROC_HIDDEN``)."""
    args = [
        BWRAP,
        "--unshare-user",
        "--uid",
        str(uid),
        "--gid",
        str(uid),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        *([] if forks else ["--disable-userns"]),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        "--seccomp",
        str(seccomp_fd),
    ]
    # the writable tmpfs first: a read-only path may live under /tmp (a checkout there)
    args += [
        "--proc",
        "/proc",
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/dev/shm",  # DataLoader workers pass batches there
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/tmp",
        "--size",
        str(TMPFS_BYTES),
        "--tmpfs",
        "/job",
    ]
    for name in () if forks else PROC_READ_ONLY:  # its own /proc's entries, read-only onto themselves
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in () if forks else PROC_HIDDEN:
        if os.path.isfile(f"/proc/{name}"):
            args += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    for name in DEVICES:
        args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for link, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        args += ["--symlink", target, f"/dev/{link}"]
    for path in _readonly_paths():
        args += ["--ro-bind", path, path]
    for top in ("/lib", "/lib64", "/lib32", "/bin"):  # merged /usr: links; otherwise the dirs
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif top != "/bin" and os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", str(HARNESS), "/harness"]
    if device == "cuda" and gpu is not None:
        args += _gpu_args(gpu)
    return [*args, "--remount-ro", "/", "--chdir", "/job"]


# ---------------------------------------------------------------- who the job is on the host


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1


def _libc_call(name: str, *args: object) -> int:
    ret = getattr(_libc, name)(*args)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return ret


def new_session_keyring() -> None:
    """Join a new, empty session keyring: no key of the worker's or of an earlier job is in
    reach (bwrap's seccomp filter refuses the keyring calls too)."""
    linux.join_session_keyring()


def _others_cannot_enter(directory: str) -> bool:
    info = os.stat(directory)
    return not info.st_mode & stat.S_IXOTH


@functools.cache
def _covers() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Where the read-only paths sit under a directory another uid cannot enter (a pyenv
    Python under a 0700 /root): each such top-most directory with the paths under it. The
    launcher, still root, lays a tmpfs over it in a mount namespace of its own and binds just
    those paths back, so a job's uid reaches them and nothing else of that directory."""
    hidden: dict[str, list[str]] = {}
    for path in [*_readonly_paths(), str(HARNESS)]:
        parts = Path(path).parts
        for depth in range(2, len(parts)):  # the ancestors below /, outermost first
            ancestor = str(Path(*parts[:depth]))
            if _others_cannot_enter(ancestor):
                hidden.setdefault(ancestor, []).append(path)
                break
    return tuple((top, tuple(paths)) for top, paths in hidden.items())


def _private_view(covers) -> None:
    """In the child, before bwrap: a mount namespace of its own where every cover is a 0755
    tmpfs holding only the paths bound back under it. Nothing of this reaches the host."""
    _libc_call("unshare", CLONE_NEWNS)
    _libc_call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    for top, paths in covers:
        fds = [os.open(p, os.O_PATH) for p in paths]
        _libc_call("mount", b"tmpfs", top.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=64k")
        for path, fd in zip(paths, fds, strict=True):
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, 0o755, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            _libc_call("mount", f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None)
            os.close(fd)


class Identity:
    """The host uid a sandbox runs as. A root worker gives each sandbox a uid of its own from
    SANDBOX_UIDS, held by an flock for the sandbox's life; any other worker runs sandboxes as
    itself (never uid 0, then)."""

    def __init__(self) -> None:
        self._lock: int | None = None
        if os.geteuid() != 0:
            self.uid, self.gid = os.getuid(), os.getgid()
            return
        UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
        for uid in random.sample(SANDBOX_UIDS, len(SANDBOX_UIDS)):
            fd = os.open(UID_LOCKS / f"{uid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid = self.gid = uid
            self._lock = fd
            return
        raise SandboxUnavailable(f"all {len(SANDBOX_UIDS)} sandbox uids are in use")

    @property
    def switches(self) -> bool:
        return self._lock is not None

    def enter(self) -> None:
        """In the child, before exec'ing bwrap (root only): the private view, then the uid."""
        if self.switches:
            if covers := _covers():
                _private_view(covers)
            os.setgroups([])
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


# ---------------------------------------------------------------- cgroups


class Cgroup:
    """A memory + pids cgroup for one sandbox (v2, or v1's two hierarchies); ``create``
    returns None, and says why once, where the host does not let us make one."""

    ROOT = Path("/sys/fs/cgroup")
    _warned = False
    _swept = False

    def __init__(self, dirs: dict[str, Path], v2: bool) -> None:
        self.dirs, self.v2 = dirs, v2

    @classmethod
    def create(cls, name: str) -> "Cgroup | None":
        try:
            return cls._create(name)
        except OSError as exc:
            cls._say_once(
                f"cannot create cgroups ({exc.strerror or exc}): no memory or pids limit beyond rlimits"
            )
            return None

    @classmethod
    @functools.cache
    def available(cls) -> bool:
        """Whether this host lets us make sandbox cgroups (else the worker watches the memory of
        each job's tree itself, and /readyz and /metrics say so)."""
        probe = cls.create(f"treino-probe-{os.getpid()}")
        if probe is not None:
            probe.destroy()
        return probe is not None

    @classmethod
    def _say_once(cls, why: str) -> None:
        if not cls._warned:
            cls._warned = True
            log.warning("sandbox: %s", why)

    @classmethod
    def _own(cls) -> dict[str, str]:
        own = {}
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                own[c] = path
        return own

    @staticmethod
    def _sweep(parent: Path) -> None:
        """Remove the empty cgroups a killed worker left (not the ones being joined right now)."""
        for stale in parent.glob("treino-*"):
            with contextlib.suppress(OSError):
                if time.time() - stale.stat().st_mtime > 60 and not (stale / "cgroup.procs").read_text():
                    stale.rmdir()

    @classmethod
    def _create(cls, name: str) -> "Cgroup | None":
        own = cls._own()
        if (cls.ROOT / "memory").is_dir() and (cls.ROOT / "pids").is_dir():  # v1
            controllers = ["memory", "pids"] + (["cpu"] if (cls.ROOT / "cpu").is_dir() else [])
            dirs = {c: cls.ROOT / c / own.get(c, "/").lstrip("/") / name for c in controllers}
            if not cls._swept:
                cls._swept = True
                for d in dirs.values():
                    cls._sweep(d.parent)
            made = []
            try:
                for d in dirs.values():
                    d.mkdir()
                    made.append(d)
            except OSError:
                for d in made:
                    d.rmdir()
                raise
            return cls(dirs, v2=False)
        if (cls.ROOT / "cgroup.controllers").exists():
            base = cls.ROOT / own.get("", "/").lstrip("/")
            enabled = (base / "cgroup.subtree_control").read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                # only possible where this cgroup holds no processes (delegate one to the worker)
                (base / "cgroup.subtree_control").write_text("+memory +pids")
            if "cpu" not in enabled:  # one CPU's share: wanted, not required
                with contextlib.suppress(OSError):
                    (base / "cgroup.subtree_control").write_text("+cpu")
            if not cls._swept:
                cls._swept = True
                cls._sweep(base)
            d = base / name
            d.mkdir()
            return cls({"memory": d, "pids": d, "cpu": d}, v2=True)
        cls._say_once("no cgroup hierarchy with memory and pids: rlimits only")
        return None

    def procs_files(self) -> list[str]:
        return sorted({str(d / "cgroup.procs") for d in self.dirs.values()})

    def attach(self, pid: int) -> None:
        """Move a running process into it; the processes it starts from now on are in it too."""
        for path in self.procs_files():
            Path(path).write_text(str(pid))

    def limit(self, memory_bytes: int, pids: int) -> None:
        memory = self.dirs["memory"]
        pid_dir = self.dirs["pids"]
        try:
            if self.v2:
                (memory / "memory.max").write_text(str(memory_bytes))
                (memory / "memory.swap.max").write_text("0")
            else:
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            (pid_dir / "pids.max").write_text(str(pids))
        except OSError as exc:  # e.g. a limit below what the warm sandbox already uses
            log.warning("sandbox: cgroup limit not set: %s", exc)
        cpu = self.dirs.get("cpu")
        if cpu is not None:  # one CPU's worth of time per period, for the whole tree
            with contextlib.suppress(OSError):
                if self.v2:
                    (cpu / "cpu.max").write_text(f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
                else:
                    (cpu / "cpu.cfs_period_us").write_text(str(CPU_PERIOD_US))
                    (cpu / "cpu.cfs_quota_us").write_text(str(CPU_PERIOD_US))

    def oom_killed(self) -> bool:
        memory = self.dirs["memory"]
        name = "memory.events" if self.v2 else "memory.oom_control"
        with contextlib.suppress(OSError):
            for line in (memory / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        return False

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                found |= {int(p) for p in Path(f).read_text().split()}
        return found

    def destroy(self) -> None:
        """Kill everything in it, then remove it (retrying while the dead are reaped)."""
        if self.v2:
            with contextlib.suppress(OSError):
                (self.dirs["memory"] / "cgroup.kill").write_text("1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            try:
                for d in set(self.dirs.values()):
                    if d.exists():
                        d.rmdir()
                return
            except OSError:
                time.sleep(0.02)
        log.warning("sandbox: cgroup %s not removed: processes remain", self.dirs["memory"])


# ---------------------------------------------------------------- watching a job


WATCH_SECONDS = 0.1  # how often the tree's memory is summed where no cgroup does it


class Cancel:
    """Set from any thread to end a running job at once (its learner cancelled it, or its
    worker lost the lease); a pipe, so the job's wait wakes on it like on the job's own end."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def set(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, b"x")

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (through /proc/PID/task/TID/children)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
    return found


PAGE = os.sysconf("SC_PAGE_SIZE")


def _proportional_bytes(pid: int) -> int:
    """A process's proportional set size: its own pages, plus its share of the pages it shares
    (DataLoader workers forked from a torch process share hundreds of MB: counting them whole,
    as RSS does, would kill a correct job); RSS where smaps_rollup is missing."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE
    return 0


def tree_memory(pid: int, host: bool = True, gpu: bool = False) -> int:
    """Bytes held by ``pid``'s whole tree: host memory (``host``, proportional set sizes) plus,
    on a GPU, the device memory NVML charges to its processes."""
    pids = _tree(pid)
    total = 0
    if host:
        total += sum(_proportional_bytes(each) for each in pids)
    if gpu:
        total += nvml.used_by(set(pids))
    return total


# ---------------------------------------------------------------- one sandbox


def _read_memfd(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a memory file; None if it holds more."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        return None
    return os.pread(fd, limit + 1, 0)


INVALID_TRACE = "invalid-trace"  # Result.reason: the trace broke its schema (the job interfered)
INCOMPLETE_TRACE = "incomplete-trace"  # Result.reason: a trace with no "D" after it (the harness's)
LIMIT_CAUSES = ("cpu", "memory", "file-size")  # a job's limits: what ended it, trace or none


def _decode_capped(data: bytes, limit: int) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return text + ("\n[output truncated]" if len(data) > limit else "")


def _cause(returncode: int | None) -> str:
    if returncode is not None and returncode > 128:  # bwrap reports a killed child as 128 + signal
        returncode = -(returncode - 128)
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU:
            return "cpu"
        if signum == signal.SIGXFSZ:
            return "file-size"
        with contextlib.suppress(ValueError):
            return signal.Signals(signum).name
        return f"signal-{signum}"
    return "no-trace"


def request(
    kind: str, job: dict, code: bytes, limits: Limits, device: str, cgroup: bool, **extra: object
) -> bytes:
    """The request a job's harness receives (``run.receive``): the job, the code, its limits."""
    address_space = None if cgroup or device == "cuda" else limits.memory_mb
    job = {**job, "kind": kind, "output_limit": limits.output_kb * 1024, "trace_limit": TRACE_LIMIT}
    return json.dumps(
        {
            "job": job,
            "code": code.decode("utf-8"),
            **extra,
            "limits": {
                "cpu_seconds": limits.cpu_seconds,
                "address_space_mb": address_space,
                # torch's allocator refuses past it at once; the watch here
                # (NVML) is the backstop for a job that lifts it
                "gpu_memory_mb": limits.memory_mb if device == "cuda" else None,
            },
        }
    ).encode("utf-8")


def send_request(sock: socket.socket, data: bytes) -> None:
    """Send it all and close: the job gets no channel back to the worker after it."""
    try:
        sock.settimeout(10)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # it died while warm; reported by the caller as a crash
    sock.close()


def wait_for_end(
    pid: int, done: int, timeout: float, memory_bytes: int, cancel: "Cancel | None", watch: bool, gpu: bool
) -> str:
    """Until the harness says it is done (``D`` on the ``done`` pipe) or process ``pid`` ends,
    woken by the kernel (a pidfd and the pipe: Popen.wait polls, up to 50 ms late): ``"done"``
    once the ``D`` came (before or with the end), ``"exited"`` when the process ended without
    it; or ``"timeout"`` once ``timeout`` passed, ``"cancelled"`` when ``cancel`` is set,
    ``"memory"`` when ``watch``-ing (no cgroup bounds the tree) or on a ``gpu`` (whose memory no
    cgroup counts) and the tree outgrew ``memory_bytes``. The pipe at its end (no "D", every
    writer gone) means the job is ending on its own: then the process's own end is awaited, so
    that its exit status tells why."""
    deadline = time.monotonic() + timeout
    watching = watch or gpu
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # already reaped
        return "done" if _said_done(done) else "exited"
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(pidfd, selectors.EVENT_READ, "exited")
            sel.register(done, selectors.EVENT_READ, "done")
            listening = True
            if cancel is not None:
                sel.register(cancel, selectors.EVENT_READ, "cancelled")
            while (left := deadline - time.monotonic()) > 0:
                events = sel.select(min(left, WATCH_SECONDS) if watching else left)
                for key, _ in events:
                    if key.data == "cancelled":
                        return "cancelled"
                if any(key.data == "exited" for key, _ in events):
                    return "done" if listening and _said_done(done) else "exited"
                if any(key.data == "done" for key, _ in events):
                    if os.read(done, 1) == b"D":
                        return "done"
                    sel.unregister(done)  # its end (or not a harness's word): none will come
                    listening = False
                if watching and tree_memory(pid, watch, gpu) > memory_bytes:
                    return "memory"
            return "timeout"
    finally:
        os.close(pidfd)


def _forget_before_hand_off(trace: int, done: int) -> None:
    """Empty a warm sandbox's trace file and its done pipe as its job is handed over. Between
    its exec and run.py's first step (not_dumpable) the sandbox could be reached through
    /proc/<pid>/fd by another job of the same uid (the process sandbox under a non-root
    worker), which planted a passing trace and a "D" there for the next learner (seen once in
    a CI run); from "ready" on it cannot be, so what is in them now was put there by no one
    this job trusts."""
    os.ftruncate(trace, 0)
    while select.select([done], [], [], 0)[0] and os.read(done, 4096):
        pass


def _said_done(done: int) -> bool:
    """Whether the harness's ``D`` is waiting in the ``done`` pipe (never blocks)."""
    ready, _, _ = select.select([done], [], [], 0)
    return bool(ready) and os.read(done, 1) == b"D"


def outcome(
    end: str,
    wall_ms: int,
    output_fd: int,
    skip: int,
    trace_fd: int,
    limits: Limits,
    returncode: int | None,
    cgroup: "Cgroup | None",
    label: str,
) -> Result:
    """The job's result from how it ended and what it left in its memory files (the output from
    byte ``skip``). The trace is read only once its harness said it was complete (``end`` is
    "done": the supervisor writes ``D`` after the last byte of it) and is parsed as the
    untrusted input it is; a trace left without that word was never finished: a failure of
    the harness, not the learner's (``INCOMPLETE_TRACE``), unless a limit of the job's ended it."""
    output = _decode_capped(os.pread(output_fd, limits.output_kb * 1024 + 1, skip), limits.output_kb * 1024)
    if end == "timeout":
        return Result("timeout", None, wall_ms, output, returncode)
    if end in ("memory", "cancelled"):
        return Result("crashed", None, wall_ms, output, returncode, end)
    raw = _read_memfd(trace_fd, TRACE_LIMIT)
    if end != "done" or not raw:
        cause = "memory" if cgroup and cgroup.oom_killed() else _cause(returncode)
        if end != "done" and raw != b"" and cause not in LIMIT_CAUSES:
            log.warning("sandbox %s: a trace without the harness's D (%s): not read", label, cause)
            cause = INCOMPLETE_TRACE
        return Result("crashed", None, wall_ms, output, returncode, cause)
    try:
        trace = trace_schema.parse(raw, TRACE_LIMIT)
    except trace_schema.Invalid as exc:  # untrusted input: never handed to a check
        log.warning("sandbox %s: trace refused: %s", label, exc)
        return Result("crashed", None, wall_ms, output, returncode, INVALID_TRACE)
    death = trace.get("death")
    if death is not None:  # the learner's program ended without a report: as if the job had
        died = -death["number"] if death["how"] == "signal" else death["number"]
        cause = "memory" if cgroup and cgroup.oom_killed() else _cause(died)
        return Result("crashed", None, wall_ms, output, died, cause)
    return Result("ok", trace, wall_ms, output, returncode)


JOB_TMPFS = ("/job", "/tmp", "/dev/shm")  # each forked job's own, over the template's


def under_job_tmpfs(paths: list[str]) -> list[str]:
    """Those of ``paths`` that a forked job's own tmpfs would cover (a venv in /tmp, say): the job
    binds them back, read-only, over its tmpfs."""
    return [p for p in paths if any(p.startswith(place + "/") for place in JOB_TMPFS)]


def template_config(isolate: bool) -> str:
    """What a template's jobs make of their sandbox (``worker/harness/template.py``), as JSON."""
    return json.dumps(
        {
            "isolate": isolate,
            "keep": under_job_tmpfs(_readonly_paths()),
            "tmpfs_bytes": TMPFS_BYTES,
            "proc_read_only": PROC_READ_ONLY,
            "proc_hidden": PROC_HIDDEN,
        },
        separators=(",", ":"),
    )


class Sandbox:
    """One single-use sandbox: started warming up, given one job, then gone.

    ``template``: started the same way (uid, cgroup, rlimits, bwrap or a plain process), but
    running the harness's ``template.py``, which forks a sandbox per job (``worker.forkserver``)
    instead of running one itself."""

    def __init__(
        self, isolation: str = "process", device: str = "cpu", gpu: int | None = None, template: bool = False
    ) -> None:
        self.isolation, self.device, self.template = isolation, device, template
        self.id = secrets.token_hex(6)
        self.started = time.monotonic()
        self._root: Path | None = None
        self._used = False
        self.identity = Identity() if isolation == "bwrap" else None
        self.cgroup = Cgroup.create(f"treino-{self.id}")
        if self.cgroup is not None:
            self.cgroup.limit(4 * 1024**3, PIDS)  # for the warm-up; the job's come at hand-off
        # this process holds every sandbox's trace and "done" pipe: a job of its uid (the
        # process-only sandbox of a worker that is not root) must not reach them through /proc
        linux.not_dumpable()
        self._output = os.memfd_create("treino-output", os.MFD_CLOEXEC)
        self._trace = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
        # a template's control socket carries one message (and a job's descriptors) per job
        self._sock, child_sock = socket.socketpair(
            socket.AF_UNIX, socket.SOCK_SEQPACKET if template else socket.SOCK_STREAM
        )
        self._done, child_done = os.pipe2(os.O_CLOEXEC)  # the harness writes "D" once the trace is in
        try:
            self.proc = self._spawn(child_sock.fileno(), child_done, gpu)
        except BaseException:
            self._sock.close()
            self._release()
            raise
        finally:
            child_sock.close()
            os.close(child_done)

    def _spawn(self, child_sock: int, child_done: int, gpu: int | None) -> subprocess.Popen:
        own: list[int] = []  # descriptors opened for the child only: closed once it has them
        if self.isolation == "bwrap":
            work, harness = "/job", "/harness"
            own.append(seccomp.fd(seccomp.TEMPLATE_ALLOWS if self.template else ()))
            assert self.identity is not None  # every bwrap sandbox has one
            prefix = _bwrap_args(self.device, gpu, self.identity.uid, own[0], forks=self.template)
            cwd = "/"
        else:
            self._root = Path(tempfile.mkdtemp(prefix="treino-job-"))
            shutil.copytree(
                HARNESS, self._root / "harness", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
            (self._root / "job").mkdir()
            work, harness, prefix = str(self._root / "job"), str(self._root / "harness"), []
            cwd = work
        if self.template:
            job_filter = seccomp.fd() if self.isolation == "bwrap" else -1
            own += [job_filter] if job_filter >= 0 else []
            program = [
                f"{harness}/template.py",
                str(child_sock),
                str(job_filter),
                template_config(self.isolation == "bwrap"),
            ]
            fds = [child_sock]
        else:
            program = [f"{harness}/run.py", work, str(child_sock), str(self._trace), str(child_done)]
            fds = [child_sock, self._trace, child_done]
        argv = [*prefix, sys.executable, "-I", "-B", *program, self.device, self.id]
        env = _environment(work)
        if self.isolation == "process" and self.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU sandbox has no GPU (bwrap binds none in)
        elif self.isolation == "process" and "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        try:
            return subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=self._output,
                start_new_session=True,
                pass_fds=fds + own,
                close_fds=True,
                preexec_fn=self._child_setup(),
            )
        finally:
            for fd in own:
                os.close(fd)

    def _child_setup(self):
        """Runs in the child between fork and exec: join the cgroup, set the rlimits, then
        become the sandbox's uid (bwrap only; see ``Identity.enter``)."""
        procs = self.cgroup.procs_files() if self.cgroup else []
        table = [
            (resource.RLIMIT_CPU, (CPU_CEILING, CPU_CEILING)),
            (resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT)),
            (resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES)),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        identity = self.identity if self.isolation == "bwrap" else None
        if identity is not None and (identity.switches or self.cgroup is None):
            nproc = PIDS if identity.switches else PIDS * 4  # every process of its host uid
            table.append((resource.RLIMIT_NPROC, (nproc, nproc)))

        def apply() -> None:
            pid = str(os.getpid()).encode()
            for path in procs:
                fd = os.open(path, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)
            for which, value in table:
                resource.setrlimit(which, value)
            if identity is not None:
                identity.enter()
            else:  # bwrap's --die-with-parent does this for its own sandboxes
                _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            new_session_keyring()

        return apply

    # ------------------------------------------------------------ state

    def ready(self, timeout: float = 0) -> bool:
        """True once warmed up (the harness said so); False if not yet, or dead."""
        if self._used or self.proc.poll() is not None:
            return False
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            if not sel.select(timeout):
                return False
        try:
            ok = self._sock.recv(1, socket.MSG_PEEK) == b"R"
        except OSError:
            return False
        return ok

    def alive(self) -> bool:
        return not self._used and self.proc.poll() is None

    def tail(self, limit: int = 500) -> str:
        """The end of what it printed itself (its warm-up; a template's own errors), for logs;
        "" once it was closed (a fork server's keeper thread closes a dead template while a job
        that failed on it logs why)."""
        try:
            size = os.fstat(self._output).st_size
            data = os.pread(self._output, limit, max(0, size - limit))
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def fork(self, fds: list[int]) -> None:
        """A template's: fork a job that gets these descriptors (its socket, output, trace, done
        and status pipes; ``worker.forkserver``). OSError when the template is gone."""
        socket.send_fds(self._sock, [b"J"], fds)

    # ------------------------------------------------------------ the job

    def run(
        self, kind: str, job: dict, code: bytes, limits: Limits, cancel: "Cancel | None" = None
    ) -> Result:
        """Hand one job over and wait for its end (or ``cancel``); the sandbox is gone afterwards."""
        if self._used or self.template:
            raise RuntimeError("a sandbox runs one job only (a template forks them)")
        try:
            if not self.ready(WARM_UP_SECONDS):
                self._kill()
                log.error("sandbox %s did not warm up: %s", self.id, self.tail())
                return Result("crashed", None, 0, "", self.proc.returncode, "sandbox-start")
            self._used = True
            self._sock.recv(1)
            _forget_before_hand_off(self._trace, self._done)
            skip = os.fstat(self._output).st_size  # the warm-up's output is ours, not the learner's
            if self.cgroup is not None:
                self.cgroup.limit(limits.memory_mb * 1024 * 1024, PIDS)
            data = request(kind, job, code, limits, self.device, self.cgroup is not None)
            started = time.monotonic()
            send_request(self._sock, data)
            end = wait_for_end(
                self.proc.pid,
                self._done,
                max(0.0, limits.wall_seconds - (time.monotonic() - started)),
                limits.memory_mb * 1024 * 1024,
                cancel,
                self.cgroup is None,
                self.device == "cuda",
            )
            wall_ms = round((time.monotonic() - started) * 1000)
            self._kill()  # nothing in it runs again: the trace and the output stay as they are now
            returncode = self.proc.wait() if end != "done" else self.proc.poll()
            return outcome(
                end, wall_ms, self._output, skip, self._trace, limits, returncode, self.cgroup, self.id
            )
        finally:
            release(self)

    def _kill(self) -> None:
        """The whole tree: bwrap's PID 1 takes its namespace down with it; the cgroup sweep
        catches what left the process group (the process-only sandbox)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            for pid in self.cgroup.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Kill it (if still running) and free everything it held."""
        self._used = True
        self._kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            self._sock.close()
        self._release()

    def _release(self) -> None:
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        for fd in (self._output, self._trace, self._done):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._output = self._trace = self._done = -1
        if self.identity is not None:  # its uid is free once nothing of it runs
            self.identity.release()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


_reaping: set[threading.Thread] = set()
_reaping_lock = threading.Lock()


class Used(Protocol):
    """What is released after a job: a single-use ``Sandbox`` or a forked job."""

    id: str
    device: str

    def close(self) -> None: ...


def release(box: Used) -> None:
    """After its job: close a used sandbox (or forked job) at once on CUDA, where the next job
    must find the GPU's memory free, else in the background."""
    if box.device == "cuda":
        box.close()
    else:
        _reap(box)


def _reap(box: Used) -> None:
    """Close a used sandbox (wait for its killed tree, remove its cgroup) in the background."""

    def close() -> None:
        try:
            box.close()
        finally:
            with _reaping_lock:
                _reaping.discard(thread)

    thread = threading.Thread(target=close, name=f"treino-reap-{box.id}", daemon=True)
    with _reaping_lock:  # started before anyone can see it: reap_all joins only started threads
        _reaping.add(thread)
        thread.start()


def reap_all(timeout: float = 10) -> None:
    """Wait until every used sandbox of this process is gone (a worker stopping, tests)."""
    deadline = time.monotonic() + timeout
    while True:
        with _reaping_lock:
            pending = list(_reaping)
        if not pending or time.monotonic() > deadline:
            return
        for thread in pending:
            thread.join(max(0.0, deadline - time.monotonic()))
