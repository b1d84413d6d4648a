"""The hand-off (worker/sandbox/job.py): a job's trace file and done pipe are made by the worker
when the job is handed over, and travel with the request on a channel the job's harness made
once it was ready, which the worker takes only if the kernel says a process of that sandbox made
it. So nothing that ran before the hand-off can hold them: before, a warm sandbox held both from
its exec on (and a fork's init from its fork), and a process that got the done pipe's write end
in that window (another job of the same uid, through /proc, before run.py's first step) could
say "D" after the hand-off: the worker read an empty trace (crashed, never a pass, but wrong).

Here the test plays that process: being root, it opens every pipe and trace file that any
process of a warm sandbox (or of a fork waiting for its job) holds, through /proc, then writes
"D" into every one of them while a clean loop is graded there. The clean loop must pass."""

import contextlib
import ctypes
import os
import select
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from tests.sandbox.test_signals_and_trace import CLEAN_LOOP
from worker import forkserver, pool, sandbox
from worker.grading import Grader
from worker.sandbox import watch

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="opens other processes' descriptors (root)")


def _steal(root: int) -> tuple[list[int], list[int]]:
    """Every pipe (as a write end) and every trace memory file held by a process of ``root``'s
    tree, opened through /proc as a thief of that window would."""
    pipes, traces, seen = [], [], set()
    for pid in watch._tree(root):  # the tree the sandbox itself watches
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                path = f"/proc/{pid}/fd/{fd}"
                with contextlib.suppress(OSError):
                    link = os.readlink(path)
                    info = os.stat(path)
                    if (info.st_dev, info.st_ino) in seen:
                        continue
                    if stat.S_ISFIFO(info.st_mode):
                        pipes.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
                    elif "treino-trace" in link:
                        traces.append(os.open(path, os.O_RDWR | os.O_CLOEXEC))
                    else:
                        continue
                    seen.add((info.st_dev, info.st_ino))
    return pipes, traces


class Thief:
    """Writes "D" into every stolen pipe, and an empty object into every stolen trace file,
    every few milliseconds, until stopped."""

    def __init__(self, pipes: list[int], traces: list[int]) -> None:
        self.pipes, self.traces = pipes, traces
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        while not self._stop.wait(0.005):
            for fd in self.pipes:
                with contextlib.suppress(OSError):
                    os.write(fd, b"D")
            for fd in self.traces:
                with contextlib.suppress(OSError):
                    os.pwrite(fd, b"{}", 0)

    def __enter__(self) -> "Thief":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for fd in self.pipes + self.traces:
            os.close(fd)


def _warm_root(runner: "pool.Pool | forkserver.ForkServer", start: str) -> int:
    """The process whose tree holds what the next job will be handed: the warm sandbox's, or
    the template's (its fork for the next job, forked ahead, among its descendants)."""
    deadline = time.monotonic() + sandbox.WARM_UP_SECONDS
    while runner.warm() < 1:
        assert time.monotonic() < deadline, "never warm"
        time.sleep(0.05)
    if start == "exec":
        assert isinstance(runner, pool.Pool)
        return runner._boxes[0].proc.pid
    assert isinstance(runner, forkserver.ForkServer)
    template = runner._current()
    assert template is not None
    runner._fork_ahead(template)
    assert runner._standby is not None
    # its init is there once it has said "P" (not read yet: the job's run reads it)
    assert select.select([runner._standby.sock], [], [], forkserver.FORK_SECONDS)[0]
    return template.proc.pid


def test_nothing_that_ran_before_the_hand_off_can_say_done_for_the_job(mode, start, exercise):
    runner = pool.Pool(1, lambda: sandbox.Sandbox(mode, "cpu")) if start == "exec" else None
    runner = runner or forkserver.ForkServer(mode, "cpu")
    try:
        with Grader(sandbox.Setup(mode, "cpu"), runner) as grader:
            pipes, traces = _steal(_warm_root(runner, start))
            with Thief(pipes, traces):
                verdict = grader.grade(exercise, CLEAN_LOOP.encode())
            assert verdict["status"] == "passed", verdict
            assert not traces  # no trace file existed before the hand-off
    finally:
        runner.close()
        sandbox.reap_all()


def _getfd(pid: int, fd: int) -> int:
    """Another process's descriptor, as ``pidfd_getfd`` gives it (a socket cannot be opened
    through /proc; jobs' filters refuse this call: only a process under none, here root)."""
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(438, pidfd, fd, 0)  # SYS_pidfd_getfd, the same number on every arch
        if got < 0:
            raise OSError(ctypes.get_errno(), "pidfd_getfd")
        return got
    finally:
        os.close(pidfd)


def test_a_ready_word_with_a_channel_made_elsewhere_is_refused_as_ours():
    """A thief holding a warm sandbox's control socket says "R" first, with a channel of its
    own making: the worker would send the job's trace file, done pipe and request on it. The
    kernel's record of who made it gives it away: the sandbox is discarded before its job
    starts (``sandbox-start``, ours; the pool then runs the job in a cold one)."""
    box = sandbox.Sandbox("process", "cpu")
    ran = False
    mine, theirs = socket.socketpair()
    thief = None
    try:
        argv = Path(f"/proc/{box.proc.pid}/cmdline").read_bytes().split(b"\0")
        script = argv.index(b"harness.run")
        thief = socket.socket(fileno=_getfd(box.proc.pid, int(argv[script + 2])))  # harness.run WORK SOCK
        socket.send_fds(thief, [b"R"], [theirs.fileno()])
        ran = True  # the run releases the sandbox itself
        result = box.run("accumulation", {}, b"", sandbox.Limits())
        assert (result.status, result.reason) == ("crashed", sandbox.SANDBOX_START)
        mine.settimeout(0)
        with pytest.raises(BlockingIOError):  # nothing was sent on the thief's channel
            mine.recv(1)
    finally:
        for sock in (thief, mine, theirs):
            if sock is not None:
                sock.close()
        if not ran:
            box.close()
        sandbox.reap_all()
