"""Linux numbers the sandbox and the harness use, in one place: system calls per architecture
(x86_64, aarch64; -1 where an architecture has no such call) and the calls made by number,
with their returns checked. Standard library only: the harness imports it inside the sandbox,
the worker from outside (``worker.harness.linux``).
"""

import ctypes
import errno
import os

MACHINE = os.uname().machine
_libc = ctypes.CDLL(None, use_errno=True)  # loaded once: calls may come between fork and exec
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # seccomp_data.arch
SYSCALLS = {
    "x86_64": {
        "clone": 56, "fork": 57, "vfork": 58, "clone3": 435,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
        "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "kcmp": 312, "setpriority": 141, "ioprio_set": 251, "prlimit64": 302,
        "sched_setparam": 142, "sched_setscheduler": 144, "sched_setattr": 314, "keyctl": 250,
        "fcntl": 72, "ioctl": 16,
    },
    "aarch64": {
        "clone": 220, "fork": -1, "vfork": -1, "clone3": 435,
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
        "rt_tgsigqueueinfo": 240, "pidfd_send_signal": 424,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "kcmp": 272, "setpriority": 140, "ioprio_set": 30, "prlimit64": 261,
        "sched_setparam": 118, "sched_setscheduler": 119, "sched_setattr": 274, "keyctl": 219,
        "fcntl": 25, "ioctl": 29,
    },
}  # fmt: skip
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_DUMPABLE = 4
# what makes a descriptor signal a process (its owner): the same on x86_64 and aarch64 (the
# generic values; alpha, mips, parisc, powerpc and sparc have others)
F_SETFL, F_SETOWN, F_SETSIG, F_SETOWN_EX = 4, 8, 10, 15  # fcntl commands
O_ASYNC = 0o20000  # F_SETFL: a signal to the owner on I/O
FIOSETOWN, SIOCSPGRP, FIOASYNC = 0x8901, 0x8902, 0x5452  # ioctl requests: the same, by ioctl


class Unsupported(OSError):
    """This machine's architecture has no numbers here."""


def numbers() -> dict[str, int]:
    """This architecture's system call numbers (``Unsupported`` where there are none)."""
    found = SYSCALLS.get(MACHINE)
    if found is None:
        raise Unsupported(errno.ENOSYS, f"no system call numbers for {MACHINE}")
    return found


def not_dumpable() -> None:
    """Make this process not dumpable: no process without CAP_SYS_PTRACE (a job of the same
    uid) can then open its ``/proc/<pid>/fd/*``, ``mem`` or ``environ``, nor trace it. Forks
    inherit it; an exec ends it. Raises if the kernel refuses (it never should)."""
    zero = ctypes.c_ulong(0)
    if _libc.prctl(PR_SET_DUMPABLE, zero, zero, zero, zero):
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(err)}")


def join_session_keyring() -> bool:
    """Join a new, empty session keyring: no key of the worker's or of an earlier job is in
    reach. False where the keyring calls are refused here (a container's filter: then they are
    refused to the job as well, which inherits it); any other failure raises."""
    if _libc.syscall(numbers()["keyctl"], KEYCTL_JOIN_SESSION_KEYRING, None) >= 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EPERM, errno.ENOSYS, errno.EACCES):
        return False
    raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")
