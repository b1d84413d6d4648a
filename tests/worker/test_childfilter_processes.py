"""The child's filter, run (issue 41): a child may never make itself dumpable again (its /proc
files, ``clear_refs`` among them, would be its own: the high-water mark its memory is graded by
could be lowered), and a kind whose memory the kernel counts lets the child start threads (the
profiler's among them) but no process, whose memory the kernel would count apart.

Each case forks a child of this test, loads the filter(s) there, tries the calls and exits with
what happened; no torch."""

import ctypes
import errno
import os
import subprocess
import sys
import threading

import pytest

from worker.harness import childfilter, libseccomp, linux

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3


def in_a_child(processes: bool, attempt) -> int:
    """``attempt()``'s exit code, run in a forked child, not dumpable as the supervisor's child
    is, under the child's filter (and, with ``processes``, the one that refuses processes
    stacked on it)."""
    base = childfilter.build(libseccomp, False)
    stacked = childfilter.build_processes(libseccomp) if processes else None
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            linux.not_dumpable()
            base.load()
            if stacked is not None:
                childfilter.stack(stacked)
            code = attempt()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) == 0:
        return 0
    return ctypes.get_errno()


def test_the_child_cannot_make_itself_dumpable_again():
    def attempt():
        said = prctl(PR_SET_DUMPABLE, 1)
        still = ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)
        return 0 if said == errno.EPERM and still == 0 else 1

    assert in_a_child(False, attempt) == 0
    assert in_a_child(True, attempt) == 0


def test_threads_run_where_processes_are_refused():
    def attempt():
        ran = []
        worker = threading.Thread(target=lambda: ran.append(True))
        worker.start()
        worker.join()
        if ran != [True]:
            return 1
        try:
            pid = os.fork()
        except PermissionError:
            pass
        else:
            if pid == 0:
                os._exit(0)
            return 2
        forked = ctypes.CDLL(None, use_errno=True).fork()
        if forked == 0:
            os._exit(0)
        if forked != -1 or ctypes.get_errno() != errno.EPERM:
            return 3
        try:
            subprocess.run(["/bin/true"], check=False)
        except PermissionError:
            return 0
        return 4

    assert in_a_child(True, attempt) == 0


def test_without_the_processes_filter_a_child_forks():
    """The control: the base filter alone (a kind whose child may fork) lets a fork through."""

    def attempt():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    assert in_a_child(False, attempt) == 0
    assert linux.PR_SET_DUMPABLE == PR_SET_DUMPABLE
