"""The seccomp filter every bubblewrap sandbox runs under (loaded by bwrap's ``--seccomp FD``).

A deny list over an allow-by-default filter, built with libseccomp: everything Docker's default
profile refuses to an unprivileged container, plus what isolate and nsjail refuse for cross-sandbox
channels. Refused calls fail with EPERM (the program sees an ordinary error, never a kill it could
mistake for a crash of ours); a syscall of another architecture (32-bit or x32 entry points) kills
the process, libseccomp's default.

CUDA: the driver talks to ``/dev/nvidia*`` through ``ioctl`` and maps device memory with
``mmap``/``mremap``/``madvise``; ``CUDA_NEEDS`` lists them, and ``build`` refuses a deny list that
touches one of them, so the GPU path stays an explicit, checked part of the filter. seccomp cannot
look inside an ioctl's argument struct: the driver's own ioctl surface is what remains (see
docs/security.md).

The bindings: the harness's own, ``worker/harness/libseccomp.py`` (ctypes over the system's
libseccomp.so.2, Debian's libseccomp2, security-maintained), which the child's filter is built
with too; they have the API of libseccomp's own Python bindings, which are not on PyPI (upstream
ships them only with its source; Debian's python3-seccomp is built for the system Python, not a
venv's). Every rule is compiled to BPF by libseccomp itself; the bindings only pass the calls.
tests/worker/test_seccomp.py builds the filter with both and finds the same program, byte for
byte; a change to the bindings has to pass that and tests/sandbox/test_hostile.py.
"""

import errno
import functools
import os
from typing import Any

from worker.harness import libseccomp, linux

# Refused outright (EPERM). Grouped by what they would give a job.
DENIED = (
    # kernel keyrings: a key planted by one job could be read by the next
    "add_key",
    "keyctl",
    "request_key",
    # io_uring: a second syscall path, much of it unfiltered by seccomp
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # looking into or steering other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    # kernel observability, eBPF, page-fault handling in user space
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "fanotify_init",
    "lookup_dcookie",
    # namespaces and mounts (bwrap has set them up; a job makes none of its own)
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    # file handles that bypass path permissions
    "name_to_handle_at",
    "open_by_handle_at",
    # the machine: modules, kexec, clocks, swap, accounting, reboot, quotas, host names
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "query_module",
    "get_kernel_syms",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "sethostname",
    "setdomainname",
    "vhangup",
    "nfsservctl",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "ioperm",
    "iopl",
    "vm86",
    "vm86old",
    # NUMA placement (Docker refuses these without CAP_SYS_NICE)
    "mbind",
    "set_mempolicy",
    "migrate_pages",
    "move_pages",
)

# What the CUDA driver (and torch on the CPU) needs; never in DENIED, checked by build().
CUDA_NEEDS = (
    "ioctl",
    "mmap",
    "munmap",
    "mremap",
    "madvise",
    "mprotect",
    "get_mempolicy",
    "sched_getaffinity",
    "clone",
    "futex",
    "openat",
    "memfd_create",
)

AF_VSOCK = 40  # host-guest sockets: isolate refuses them
TIOCSTI = 0x5412  # push characters into a terminal's input
TIOCLINUX = 0x541C


class Unavailable(RuntimeError):
    """libseccomp is missing: bwrap sandboxes cannot be filtered."""


# What a fork-server template (worker.forkserver) may still call, and only its own code does:
# each job forked from it makes its namespaces, mounts its own /job, /tmp and /proc and joins a
# new session keyring, then loads the whole filter on top (filters stack: the stricter wins).
TEMPLATE_ALLOWS = ("unshare", "mount", "keyctl")


@functools.cache
def program(allow: tuple[str, ...] = ()) -> bytes:
    """The filter as a BPF program, built once per process; ``allow`` takes calls off the deny
    list (only ever ``TEMPLATE_ALLOWS``)."""
    try:
        return build(libseccomp, allow)
    except OSError as exc:  # libseccomp.so.2 missing, or a call of it refused
        raise Unavailable(f"libseccomp cannot build the filter ({exc})") from exc


def build(seccomp: Any, allow: tuple[str, ...] = ()) -> bytes:
    """The program, built with ``seccomp``: a module with the API of libseccomp's Python bindings."""
    overlap = set(DENIED) & set(CUDA_NEEDS)
    if overlap:
        raise ValueError(f"the filter would break CUDA: {sorted(overlap)}")
    eperm = seccomp.ERRNO(errno.EPERM)
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED:
        if name in allow:
            continue
        try:
            f.add_rule(eperm, name)
        except (RuntimeError, ValueError, OSError):  # not a syscall of this architecture
            continue
    for flag in linux.CLONE_NAMESPACES.values():  # a plain thread or fork has none of them
        f.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory seccomp cannot read: ENOSYS makes glibc fall back to clone
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.EQ, AF_VSOCK))
    for request in (TIOCSTI, TIOCLINUX):
        f.add_rule(eperm, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    memfd = os.memfd_create("treino-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(memfd), "wb") as out:
            f.export_bpf(out)
        return os.pread(memfd, 1 << 20, 0)
    finally:
        os.close(memfd)


def fd(allow: tuple[str, ...] = ()) -> int:
    """A fresh memory file holding the program, positioned at its start, for one bwrap."""
    data = program(allow)
    memfd = os.memfd_create("treino-seccomp", 0)  # inherited by bwrap, which reads and closes it
    os.write(memfd, data)
    os.lseek(memfd, 0, os.SEEK_SET)
    return memfd
