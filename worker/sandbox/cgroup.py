"""A memory, pids and CPU cgroup per sandbox (v2, or v1's hierarchies), where the host lets us
make one; else the worker watches the memory of each job's tree itself (``watch``)."""

import contextlib
import functools
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("treino.sandbox")

CPU_PERIOD_US = 100_000  # cgroup cpu quota = period: at most one CPU for a sandbox's whole tree
PIDS = 256  # processes and threads per sandbox (pids cgroup; RLIMIT_NPROC without one)


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

    def memory_counters(self) -> list[int]:
        """Two descriptors the job's supervisor reads its cgroup's memory through (sent with the
        request, ``job.hand_over``; ``observer.Counters``): the bytes charged now (read only) and
        the peak (read and write, so that the supervisor can start it anew as the learner's file
        loads: v1's ``memory.max_usage_in_bytes``, v2's ``memory.peak``, which Linux 6.12 and later
        reset for the descriptor written to). What the kernel charges here and no process's
        resident set shows (files on the job's tmpfs, pipe and socket buffers) counts as memory
        too. Empty where they cannot be opened; the child closes every descriptor it inherits."""
        memory = self.dirs["memory"]
        v1 = ("memory.usage_in_bytes", "memory.max_usage_in_bytes")
        names = ("memory.current", "memory.peak") if self.v2 else v1
        fds: list[int] = []
        try:
            fds.append(os.open(memory / names[0], os.O_RDONLY | os.O_CLOEXEC))
            fds.append(os.open(memory / names[1], os.O_RDWR | os.O_CLOEXEC))
        except OSError as exc:
            for fd in fds[1:]:  # the current figure alone still says something
                os.close(fd)
            del fds[1:]
            log.debug("sandbox: cgroup memory counters: %s", exc)
        return fds

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
