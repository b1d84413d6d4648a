"""Linux numbers the sandbox and the harness use, in one place, and the calls made with them,
their returns checked: a failure raises ``OSError`` with the call's errno, never passes silently.

System call numbers are per architecture (x86_64, aarch64); a call made by number on another
machine raises ``Unsupported`` (the filters name their calls and let libseccomp number them).
Standard library only: the sandbox imports it as ``harness.linux``, the worker as
``worker.harness.linux``.
"""

import ctypes
import errno
import os
import struct

MACHINE = os.uname().machine
_libc = ctypes.CDLL(None, use_errno=True)  # loaded once: calls may come between fork and exec
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # seccomp_data.arch
# the calls made by number (the C library has no wrapper for them)
SYSCALLS = {
    "x86_64": {"keyctl": 250},
    "aarch64": {"keyctl": 219},
}
KEYCTL_JOIN_SESSION_KEYRING = 1

# unshare(2), clone(2): the namespaces
CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACES = {
    "CLONE_NEWNS": CLONE_NEWNS,
    "CLONE_NEWCGROUP": CLONE_NEWCGROUP,
    "CLONE_NEWUTS": CLONE_NEWUTS,
    "CLONE_NEWIPC": CLONE_NEWIPC,
    "CLONE_NEWUSER": CLONE_NEWUSER,
    "CLONE_NEWPID": CLONE_NEWPID,
    "CLONE_NEWNET": CLONE_NEWNET,
    "CLONE_NEWTIME": CLONE_NEWTIME,
}
# mount(2)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# prctl(2)
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2
CAPABILITY_VERSION_3 = 0x20080522  # capset(2)'s header
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
        raise Unsupported(errno.ENOSYS, f"no system call numbers for {MACHINE} (only {', '.join(SYSCALLS)})")
    return found


def check(ret: int, what: str) -> int:
    """``ret`` of a C library call; ``OSError`` with its errno where it failed (negative)."""
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _ulong(value: int) -> ctypes.c_ulong:
    return ctypes.c_ulong(value)


def prctl(option: int, arg2: int = 0, arg3: int = 0, what: str = "prctl") -> int:
    """prctl(2) with unsigned long arguments (the kernel reads five of them)."""
    zero = _ulong(0)
    return check(_libc.prctl(option, _ulong(arg2), _ulong(arg3), zero, zero), what)


def not_dumpable() -> None:
    """Make this process not dumpable: no process without CAP_SYS_PTRACE (a job of the same
    uid) can then open its ``/proc/<pid>/fd/*``, ``mem`` or ``environ``, nor trace it. Forks
    inherit it; an exec ends it."""
    prctl(PR_SET_DUMPABLE, 0, what="prctl(PR_SET_DUMPABLE, 0)")


def die_with_parent(signal_number: int) -> None:
    """``signal_number`` to this process when its parent (the thread that forked it) ends."""
    prctl(PR_SET_PDEATHSIG, signal_number, what="prctl(PR_SET_PDEATHSIG)")


def become_subreaper() -> None:
    """Orphans among this process's descendants come back to it, not to the namespace's init."""
    prctl(PR_SET_CHILD_SUBREAPER, 1, what="prctl(PR_SET_CHILD_SUBREAPER)")


def unshare(flags: int) -> None:
    check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    check(
        _libc.mount(
            source and source.encode(),
            target.encode(),
            fstype and fstype.encode(),
            _ulong(flags),
            data and data.encode(),
        ),
        f"mount {target}",
    )


def drop_capabilities() -> None:
    """No capability left, now or after an exec: the bounding set (where this process may
    change it: that takes CAP_SETPCAP; without it no exec can gain one anyway, the filters
    setting no_new_privs), the ambient set, then the effective, permitted and inheritable sets."""
    zero = _ulong(0)
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, _ulong(cap), zero, zero, zero) < 0:
            err = ctypes.get_errno()
            if err == errno.EINVAL:  # past the last capability this kernel has
                break
            if err != errno.EPERM:
                raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")
    if _libc.prctl(PR_CAP_AMBIENT, _ulong(PR_CAP_AMBIENT_CLEAR_ALL), zero, zero, zero) < 0:
        err = ctypes.get_errno()
        if err != errno.EINVAL:  # a kernel before 4.3 has no ambient set
            raise OSError(err, f"prctl(PR_CAP_AMBIENT_CLEAR_ALL): {os.strerror(err)}")
    header = struct.pack("Ii", CAPABILITY_VERSION_3, 0)
    data = ctypes.create_string_buffer(24)  # two zeroed {effective, permitted, inheritable}
    check(_libc.capset(ctypes.c_char_p(header), data), "capset")


def join_session_keyring() -> bool:
    """Join a new, empty session keyring: no key of the worker's or of an earlier job is in
    reach. False where the keyring calls are refused here (a container's filter: then they are
    refused to the job as well, which inherits it); any other failure raises."""
    if _libc.syscall(ctypes.c_long(numbers()["keyctl"]), KEYCTL_JOIN_SESSION_KEYRING, None) >= 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EPERM, errno.ENOSYS, errno.EACCES):
        return False
    raise OSError(err, f"keyctl(JOIN_SESSION_KEYRING): {os.strerror(err)}")
