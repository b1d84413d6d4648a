"""Waiting for a job's end: the harness's word on the done pipe, the process's own end (a
pidfd), the wall clock, a cancel, and where no cgroup bounds the tree (or on a GPU, whose
memory no cgroup counts) the memory of the job's whole tree, summed here."""

import contextlib
import os
import select
import selectors
import time

import psutil

from worker import nvml
from worker.harness.protocol import Word

WATCH_SECONDS = 0.1  # how often the tree's memory is summed where no cgroup does it
PAGE = os.sysconf("SC_PAGE_SIZE")


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
    """``pid`` and all its descendants, through /proc/PID/task/TID/children: the cost follows
    the tree, not the host (psutil's ``children(recursive=True)`` reads every process's stat,
    twice the time for a host of a hundred processes, and this runs every ``WATCH_SECONDS``)."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    stack.extend(int(child) for child in f.read().split())
    return found


def _proportional_bytes(pid: int) -> int:
    """A process's proportional set size: its own pages, plus its share of the pages it shares
    (DataLoader workers forked from a torch process share hundreds of MB: counting them whole,
    as RSS does, would kill a correct job); 0 for a process gone or out of reach."""
    try:
        return int(psutil.Process(pid).memory_full_info().pss)
    except (psutil.Error, OSError):
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


def _said_done(done: int) -> bool:
    """Whether the harness's ``D`` is waiting in the ``done`` pipe (never blocks)."""
    ready, _, _ = select.select([done], [], [], 0)
    return bool(ready) and os.read(done, 1) == Word.DONE


def wait_for_end(
    pid: int, done: int, timeout: float, memory_bytes: int, cancel: Cancel | None, watch: bool, gpu: bool
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
                    if os.read(done, 1) == Word.DONE:
                        return "done"
                    sel.unregister(done)  # its end (or not a harness's word): none will come
                    listening = False
                if watching and tree_memory(pid, watch, gpu) > memory_bytes:
                    return "memory"
            return "timeout"
    finally:
        os.close(pidfd)
