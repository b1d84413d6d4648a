"""libseccomp through ctypes: the few calls the child's filter (``childfilter``) and the
sandbox's (``worker/seccomp.py``, which imports this module as ``worker.harness.libseccomp``)
need, under the names of libseccomp's own Python bindings (``seccomp``). So each build function
takes either, and tests/worker/test_childfilter.py and tests/worker/test_seccomp.py find the same
program, byte for byte, with both.

Standard library only (the harness runs with nothing else): the system's libseccomp.so.2,
which bubblewrap sandboxes see under the read-only /usr/lib, as the process sandbox sees the
host's. It is opened by its soname, never through ``ctypes.util.find_library`` (that runs
``ldconfig``: a process the child's filter may refuse).
"""

import ctypes
import os
from typing import IO, Any

ALLOW = 0x7FFF0000
NE, EQ, MASKED_EQ = 1, 4, 7  # enum scmp_compare
_SONAME = "libseccomp.so.2"


def ERRNO(number: int) -> int:  # noqa: N802 (the bindings' name)
    return 0x00050000 | (number & 0xFFFF)


class Arch:
    NATIVE = 0


class Attr:
    ACT_BADARCH = 2  # the action for a call of another architecture (i386, x32, …)


class Arg:
    """One comparison of a call's argument ``arg``: ``op`` with ``datum_a`` (for MASKED_EQ
    the mask) and ``datum_b`` (for MASKED_EQ the value)."""

    def __init__(self, arg: int, op: int, datum_a: int, datum_b: int = 0) -> None:
        self.arg, self.op, self.datum_a, self.datum_b = arg, op, datum_a, datum_b


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


_library: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """The library, its prototypes declared, opened once (OSError where it is missing)."""
    global _library
    if _library is None:
        lib = ctypes.CDLL(_SONAME, use_errno=True)
        for name, restype, argtypes in (
            ("seccomp_init", ctypes.c_void_p, (ctypes.c_uint32,)),
            ("seccomp_release", None, (ctypes.c_void_p,)),
            ("seccomp_load", ctypes.c_int, (ctypes.c_void_p,)),
            ("seccomp_attr_set", ctypes.c_int, (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)),
            ("seccomp_syscall_resolve_name_arch", ctypes.c_int, (ctypes.c_uint32, ctypes.c_char_p)),
            (
                "seccomp_rule_add_array",
                ctypes.c_int,
                (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p),
            ),
            ("seccomp_export_bpf", ctypes.c_int, (ctypes.c_void_p, ctypes.c_int)),
        ):
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        _library = lib
    return _library


def _check(ret: int, what: str) -> None:
    """libseccomp returns -errno."""
    if ret < 0:
        raise OSError(-ret, f"{what}: {os.strerror(-ret)}")


def resolve_syscall(arch: int, name: str) -> int:
    """The call's number on ``arch`` (negative where that architecture has no such call)."""
    return _lib().seccomp_syscall_resolve_name_arch(arch, name.encode())


class SyscallFilter:
    """A filter being built (``seccomp_init``), freed with this object."""

    def __init__(self, defaction: int) -> None:
        self._lib = _lib()
        self._ctx = self._lib.seccomp_init(defaction)
        if not self._ctx:
            raise OSError(ctypes.get_errno(), "seccomp_init failed")

    def __del__(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx:
            self._lib.seccomp_release(ctx)

    def set_attr(self, attr: int, value: int) -> None:
        _check(self._lib.seccomp_attr_set(self._ctx, attr, value), f"seccomp_attr_set({attr})")

    def add_rule(self, action: int, syscall: str | int, *args: Arg) -> None:
        number = resolve_syscall(Arch.NATIVE, syscall) if isinstance(syscall, str) else syscall
        compared = (_ArgCmp * len(args))(*(_ArgCmp(a.arg, a.op, a.datum_a, a.datum_b) for a in args))
        ret = self._lib.seccomp_rule_add_array(self._ctx, action, number, len(args), compared)
        _check(ret, f"seccomp_rule_add({syscall})")

    def export_bpf(self, file: IO[Any]) -> None:
        _check(self._lib.seccomp_export_bpf(self._ctx, file.fileno()), "seccomp_export_bpf")

    def load(self) -> None:
        """Load it into this thread (and set no_new_privs, libseccomp's default)."""
        _check(self._lib.seccomp_load(self._ctx), "seccomp_load")
