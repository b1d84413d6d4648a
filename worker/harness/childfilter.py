"""The child's own seccomp filter, stacked on the sandbox's (docs/security.md): it can stop,
renice, reschedule, trace or read no other process, nor have a descriptor signal one (``NEVER``,
``REFUSED``: EPERM), and every call through another ABI fails with EPERM (i386, x32: no
training loop makes one). With ``alone``, no new thread or process either: ``clone``, ``fork``
and ``vfork`` fail with EPERM (Python: "can't start new thread", ``OSError`` from ``os.fork``),
``clone3`` with ENOSYS (so that the C library falls back to clone); the in-process meters see
one thread (saved-tensor hooks and dispatch modes are per thread) of one process. A kind whose
memory the kernel counts stacks ``build_processes``'s instead: threads, but no process. It can
never make itself dumpable again (``PR_SET_DUMPABLE``), which would give it its own ``/proc``
files, ``clear_refs`` among them.

Built by libseccomp, as the sandbox's filter is (``worker/seccomp.py``): ``build`` takes any
module with the API of libseccomp's Python bindings; the harness passes its ctypes one
(``libseccomp``), standard library only. Standard library only.
"""

import errno
import signal
from types import ModuleType
from typing import Any

from . import libseccomp, linux

# never, from the child: reaching into another process (the supervisor) or signalling by pidfd
NEVER = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "pidfd_send_signal")
ALONE = ("clone", "fork", "vfork")  # and clone3 (ENOSYS)
PROCESSES = ("fork", "vfork")  # and clone without CLONE_THREAD, clone3 (ENOSYS): threads may run
CLONE_THREAD = 0x00010000
# refused where any clause holds, a clause being tests (argument, "==", "!=" or "&" (the
# value's bit set), value) that all hold
REFUSED = {
    # SIGSTOP to anyone: the one signal that stops the supervisor that it cannot ignore
    **{name: (((1, "==", signal.SIGSTOP),),) for name in ("kill", "tkill", "rt_sigqueueinfo")},
    **{name: (((2, "==", signal.SIGSTOP),),) for name in ("tgkill", "rt_tgsigqueueinfo")},
    # renicing, rescheduling or limits of any process but the caller itself (0; for
    # setpriority and ioprio_set, by process)
    "setpriority": (((0, "!=", 0),), ((1, "!=", 0),)),  # PRIO_PROCESS, itself
    "ioprio_set": (((0, "!=", 1),), ((1, "!=", 0),)),  # IOPRIO_WHO_PROCESS, itself
    **{
        name: (((0, "!=", 0),),)
        for name in ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setattr")
    },
    # a descriptor that signals a process on I/O: its owner (any process: the signal goes out
    # with the child's uid, past the rules above), the signal (SIGSTOP too) and O_ASYNC; the
    # descriptor calls Python and torch make (F_GETFL, F_SETFL without O_ASYNC, F_GETFD,
    # F_SETFD, F_DUPFD_CLOEXEC, locks, FIONREAD) stay allowed
    "fcntl": (
        ((1, "==", linux.F_SETOWN),),
        ((1, "==", linux.F_SETOWN_EX),),
        ((1, "==", linux.F_SETSIG),),
        ((1, "==", linux.F_SETFL), (2, "&", linux.O_ASYNC)),
    ),
    "ioctl": tuple(((1, "==", request),) for request in (linux.FIOSETOWN, linux.SIOCSPGRP, linux.FIOASYNC)),
    # dumpable again, its /proc files would be its own: /proc/self/clear_refs lowers the
    # high-water mark the supervisor reads its memory peak from (``observer.process_memory``)
    "prctl": (((0, "==", linux.PR_SET_DUMPABLE),),),
}
LOW_WORD = 0xFFFFFFFF


def _compare(seccomp: ModuleType, arg: int, op: str, value: int) -> Any:
    """One test as libseccomp compares it. The arguments tested are ints to the kernel, which
    reads their low 32 bits only: "==" compares the low word (a set high word must not slip a
    SIGSTOP past it); "!=" compares all 64 bits, which refuses a little more than the low word
    would (a call whose high word alone is set), never less. "&" is libseccomp's MASKED_EQ with
    the value as mask and datum: "all of the value's bits set", which is "any of them" only for
    one bit; libseccomp has no "any bit of a mask" comparison, so a test of several bits would
    need a clause per bit (``build`` refuses one)."""
    if op == "==":
        return seccomp.Arg(arg, seccomp.MASKED_EQ, LOW_WORD, value)
    if op == "!=":
        return seccomp.Arg(arg, seccomp.NE, value)
    if op == "&" and value > 0 and value & (value - 1) == 0:
        return seccomp.Arg(arg, seccomp.MASKED_EQ, value, value)
    if op == "!&" and value > 0 and value & (value - 1) == 0:  # the value's bit clear
        return seccomp.Arg(arg, seccomp.MASKED_EQ, value, 0)
    raise ValueError(f"no libseccomp comparison for {op} {value:#x}")


def build(seccomp: ModuleType, alone: bool) -> Any:
    """The child's filter (not loaded): ``seccomp`` is a module with the API of libseccomp's
    Python bindings. Calls this architecture lacks (fork and vfork on aarch64) are left out."""
    eperm = seccomp.ERRNO(errno.EPERM)
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    f.set_attr(seccomp.Attr.ACT_BADARCH, eperm)  # i386 (int 0x80) and x32 calls
    for name in (ALONE if alone else ()) + NEVER:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:
            f.add_rule(eperm, name)
    if alone:
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for name, clauses in REFUSED.items():
        for clause in clauses:
            f.add_rule(eperm, name, *(_compare(seccomp, *test) for test in clause))
    return f


def build_processes(seccomp: ModuleType) -> Any:
    """A filter to stack on ``build(seccomp, False)``'s for a child that may start threads but no
    process, which the kernel would count apart from it (a kind whose memory is graded from the
    kernel's count of the child: ``observer.process_memory``): ``fork``, ``vfork`` and a
    ``clone`` without ``CLONE_THREAD`` (``posix_spawn``'s and ``subprocess``'s too) fail with
    EPERM, ``clone3`` with ENOSYS (the C library then makes its threads with ``clone``)."""
    eperm = seccomp.ERRNO(errno.EPERM)
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    f.set_attr(seccomp.Attr.ACT_BADARCH, eperm)
    for name in PROCESSES:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) >= 0:
            f.add_rule(eperm, name)
    f.add_rule(eperm, "clone", _compare(seccomp, 0, "!&", CLONE_THREAD))
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return f


def prepare_processes() -> libseccomp.SyscallFilter:
    """``build_processes``'s filter, built by the supervisor before the fork (a failure to is
    ours); the child loads it with ``stack`` before the learner's code runs."""
    linux.numbers()
    return build_processes(libseccomp)


def stack(prepared: libseccomp.SyscallFilter) -> None:
    """In the child, already under ``guard``'s filter (no_new_privs set): one more filter."""
    prepared.load()


def prepare(alone: bool) -> libseccomp.SyscallFilter:
    """The filter, built by the supervisor before the fork: any failure to build it is ours
    and raises there; the child only loads it (``guard``)."""
    linux.numbers()  # Unsupported on an architecture this harness has no numbers for
    return build(libseccomp, alone)


def guard(prepared: libseccomp.SyscallFilter) -> None:
    """In the child: no capability left (``linux.drop_capabilities``), then the filter
    ``prepared`` made (libseccomp's load sets no_new_privs first). Raises if either fails."""
    linux.drop_capabilities()
    prepared.load()
