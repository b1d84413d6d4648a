"""A warm sandbox's trace file and done pipe are emptied as its job is handed over
(worker/sandbox/job.py ``forget_before_hand_off``), and the emptying is bounded: a process still
holding the pipe's write end could keep it full forever. Past 64 KiB the sandbox is discarded
as crashed before its job starts (``sandbox-start``: ours, never the learner's), and the pool
runs the job in a cold one."""

import fcntl
import os
import time
from pathlib import Path

import pytest

from worker import sandbox
from worker.sandbox import job


def _pipe() -> tuple[int, int]:
    return os.pipe2(os.O_CLOEXEC)


def test_what_was_planted_is_forgotten():
    trace = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
    read, write = _pipe()
    try:
        os.write(trace, b'{"planted": true}')
        os.write(write, b"D" * 10_000)
        assert job.forget_before_hand_off(trace, read)
        assert os.fstat(trace).st_size == 0
        os.set_blocking(read, False)
        with pytest.raises(BlockingIOError):  # empty, its writer still there
            os.read(read, 1)
    finally:
        for fd in (trace, read, write):
            os.close(fd)


def test_a_pipe_whose_writers_are_gone_is_drained_to_its_end():
    trace = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
    read, write = _pipe()
    os.write(write, b"D")
    os.close(write)
    try:
        assert job.forget_before_hand_off(trace, read)
    finally:
        os.close(trace)
        os.close(read)


def test_a_pipe_that_still_holds_data_after_64_kib_is_not_drained_further():
    """A writer that keeps it full, or a pipe made larger than its 64 KiB (F_SETPIPE_SZ) and
    filled: the drain stops at 64 KiB and says so."""
    trace = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
    read, write = _pipe()
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 1 << 20)
        os.write(write, b"D" * (128 * 1024))
        started = time.monotonic()
        assert not job.forget_before_hand_off(trace, read)
        assert time.monotonic() - started < 2
    finally:
        for fd in (trace, read, write):
            os.close(fd)


@pytest.mark.skipif(os.geteuid() != 0, reason="opens a not-dumpable process's descriptor (root)")
def test_a_warm_sandbox_whose_done_pipe_holds_more_than_64_kib_is_discarded_as_ours():
    box = sandbox.Sandbox("process", "cpu")
    ran = False
    try:
        assert box.ready(sandbox.WARM_UP_SECONDS)
        argv = Path(f"/proc/{box.proc.pid}/cmdline").read_bytes().split(b"\0")
        script = [a.endswith(b"/run.py") for a in argv].index(True)
        done = int(argv[script + 4])  # run.py WORK SOCK TRACE DONE
        write = os.open(f"/proc/{box.proc.pid}/fd/{done}", os.O_WRONLY | os.O_CLOEXEC)
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 1 << 20)  # room for more than the drain reads
        os.write(write, b"D" * (128 * 1024))
        os.close(write)
        started = time.monotonic()
        ran = True  # the run releases the sandbox itself
        result = box.run("accumulation", {}, b"", sandbox.Limits())
        assert (result.status, result.reason) == ("crashed", sandbox.SANDBOX_START)
        assert result.trace is None and time.monotonic() - started < 10
    finally:
        if not ran:
            box.close()
        sandbox.reap_all()
