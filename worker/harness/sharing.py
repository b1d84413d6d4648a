"""How the parameters' storage is shared with the supervisor: the one device-specific piece of
the flow (docs/architecture.md, "One flow for both devices: the child owns the scenario").

The child builds the seeded scenario (the kind's ``set_up``, before any of the learner's code:
the learner's file is not loaded yet, so the child is still trusted there) and hands the
parameters' storage to its supervisor over the link, once (``Link.share``). The supervisor
checks each tensor's shape and dtype against the layout the kind asked for (``layout``, from its
device-free ``prepare``), maps the storage, and from then on reads the parameters from it at each
sync without the child's help (``Reader.snapshot``), as it read its own mapping before.

Per device, an exporter (in the child) and an opener (in the supervisor), in ``DEVICES``:

- ``cpu``: sealed memory files (``memfd_create``, no shrinking or growing once sealed: the
  supervisor's reads can never fault), the tensors moved into shared mappings of them, their
  descriptors passed with ``SCM_RIGHTS``; the supervisor maps them read-only;
- ``cuda`` (not built: no GPU was lent while this was written): each storage's CUDA IPC handle
  (``UntypedStorage._share_cuda_()``), opened by the supervisor in a context of its own
  (``UntypedStorage._new_shared_cuda``) and copied to its host memory at each sync. Until then a
  CUDA job runs inline (``runtime.Api.supervise``), where the hand-off is ``observer.Shared``.

A memory file's size counts against the sandbox's file-size limit (``RLIMIT_FSIZE``, 16 MiB,
``worker/sandbox/launcher.py``): the storage is spread over files of at most ``FILE_CAP``, each
tensor's file and offset computed from the layout alone, by the child and the supervisor alike.
A tensor larger than ``FILE_CAP`` (adapter's 32 MiB weights) spans consecutive files, each full
but its last; both sides map all the files back to back in one reserved range (``_Region``: an
anonymous ``PROT_NONE`` reservation, each file mapped into it with ``MAP_FIXED``), so that such a
tensor's storage is one contiguous range of addresses.

Standard library only when imported: torch is imported by the functions that make or read the
tensors, so the supervisor's core (``supervise``, ``link``) is tested without it.
"""

import ctypes
import fcntl
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .link import Interference

if TYPE_CHECKING:
    import torch

ALIGN = 64
MAX_TENSORS = 256  # tensors in one hand-off
# the dtypes a kind may share, and their sizes: the supervisor computes the offsets itself
ITEM_SIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
FORMATS = {"float64": "d", "float32": "f", "float16": "e"}  # memoryview's, in this machine's order
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
# a memory file's size counts against the sandbox's file-size limit (RLIMIT_FSIZE, 16 MiB,
# worker/sandbox/launcher.py): the storage is spread over files of at most this much
FILE_CAP = 8 << 20
MAX_FILES = 16  # descriptors in one hand-off (adapter's, the largest: 9)
# mmap's flags that Python's module does not name (Linux's values)
PROT_NONE, MAP_FIXED, MAP_NORESERVE = 0, 0x10, 0x4000

Layout = list[dict[str, Any]]  # [{"shape": [...], "dtype": "float64"}], in order

# the child's mappings of its hand-off, held for its life: a program that rebinds its parameters'
# ``data`` leaves their pages mapped in its process, where the kernel counts them, as the old
# path's mapping stayed (checkpointing's release run: weights freed as a step ended offset the
# gradients it kept, red team 4)
_HELD: list["_Region"] = []

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Region:
    """Memory files mapped back to back in one range of this process's addresses: the range
    reserved first (anonymous, ``PROT_NONE``, nothing committed), then each file mapped over its
    part of it (``MAP_FIXED | MAP_SHARED``), at page-rounded starts: a file other than a span's
    last is ``FILE_CAP`` long (whole pages), so a tensor spread over consecutive files is one
    contiguous range. ``writable``: the child's (it computes there); the supervisor's is read-only."""

    def __init__(self, fds: list[int], sizes: list[int], writable: bool) -> None:
        self.starts, start = [], 0
        for size in sizes:
            self.starts.append(start)
            start += -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
        self.size = max(start, mmap.PAGESIZE)
        base = _libc.mmap(
            None, self.size, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0
        )
        if base in (None, _MAP_FAILED):
            raise OSError(ctypes.get_errno(), "the hand-off's range cannot be reserved")
        self.base: int = base
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        try:
            for fd, size, at in zip(fds, sizes, self.starts, strict=True):
                got = _libc.mmap(self.base + at, size, prot, mmap.MAP_SHARED | MAP_FIXED, fd, 0)
                if got != self.base + at:
                    raise OSError(ctypes.get_errno(), "a memory file cannot be mapped")
        except BaseException:
            self.close()
            raise

    def address(self, file: int, offset: int) -> int:
        return self.base + self.starts[file] + offset

    def holds(self, address: int, nbytes: int) -> bool:
        return self.base <= address and address + nbytes <= self.base + self.size

    def buffer(self, address: int, nbytes: int) -> Any:
        """``nbytes`` from ``address`` as a buffer (torch's ``frombuffer``)."""
        return (ctypes.c_char * max(nbytes, 1)).from_address(address)

    def drop(self, address: int, nbytes: int) -> None:
        """The pages of ``nbytes`` from ``address`` (from the page its first byte is in) out of
        this process's page tables (``MADV_DONTNEED``: a shared file's bytes stay)."""
        start = address - address % mmap.PAGESIZE
        if nbytes and _libc.madvise(start, address + nbytes - start, mmap.MADV_DONTNEED) != 0:
            raise OSError(ctypes.get_errno(), "madvise")

    def close(self) -> None:
        if self.base:
            _libc.munmap(self.base, self.size)
            self.base = 0


def layout(tensors: Iterable["torch.Tensor"]) -> Layout:
    """The shapes and dtypes of ``tensors`` (a kind's ``prepare`` gives it of a model built on
    the CPU without its data, ``set_up``'s tensors are held to it)."""
    return [
        {"shape": [int(n) for n in t.shape], "dtype": str(t.dtype).removeprefix("torch.")} for t in tensors
    ]


def placement(expected: Layout) -> tuple[list[tuple[int, int]], list[int]]:
    """Each tensor's place, ``(file, byte offset)``, and each file's size, from the layout
    alone: the tensors in order, each aligned to ``ALIGN``, a new file begun where the next
    would take one past ``FILE_CAP``; a tensor larger than ``FILE_CAP`` begins a file and spans
    as many as it needs, each full but its last (mapped back to back: ``_Region``), the next
    tensor placed after it in its last. What the child must have made."""
    places: list[tuple[int, int]] = []
    sizes = [0]
    for entry in expected:
        nbytes = _count(entry["shape"]) * ITEM_SIZE[entry["dtype"]]
        offset = -(-sizes[-1] // ALIGN) * ALIGN
        if sizes[-1] and offset + nbytes > FILE_CAP:
            sizes.append(0)
            offset = 0
        places.append((len(sizes) - 1, offset))
        while offset + nbytes > FILE_CAP:  # only a tensor begun at a file's start: it spans
            sizes[-1] = FILE_CAP
            sizes.append(0)
            nbytes -= FILE_CAP - offset
            offset = 0
        sizes[-1] = offset + nbytes
    return places, [max(size, 1) for size in sizes]


# ---------------------------------------------------------------- the child's side (cpu)


def export_cpu(tensors: list["torch.Tensor"], dropped: int = 0) -> tuple[dict[str, Any], list[int]]:
    """Move ``tensors`` (on the CPU) into sealed shared memory files (``placement``), one
    tensor at a time (its own storage freed as the next is copied: the child's memory holds
    one tensor more at most): each one's ``data`` is from now on a view of its file's mapping.
    The last ``dropped`` tensors' pages are dropped from this process's page tables once copied
    (``MADV_DONTNEED``: the memory file keeps their bytes, and the job's cgroup its charge; the
    process's resident set counts them again only once it reads them: checkpointing's release
    run). Returns the hand-off's message and the descriptors to send with it (the caller closes
    them once sent; the mappings keep the memory)."""
    import torch

    described = layout(tensors)
    places, sizes = placement(described)
    fds: list[int] = []
    try:
        for size in sizes:
            fds.append(os.memfd_create("parameters", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING))
            os.ftruncate(fds[-1], size)
            fcntl.fcntl(fds[-1], fcntl.F_ADD_SEALS, SEALS)
        region = _Region(fds, sizes, writable=True)
        _HELD.append(region)
        first_dropped = len(tensors) - max(dropped, 0)
        for i, (t, (file, offset)) in enumerate(zip(tensors, places, strict=True)):
            if t.device.type != "cpu":
                raise ValueError(f"a {t.device.type} tensor cannot be shared through memory")
            address, nbytes = region.address(file, offset), t.numel() * t.element_size()
            view = torch.frombuffer(region.buffer(address, nbytes), dtype=t.dtype, count=t.numel())
            view = view.view(t.shape)
            with torch.no_grad():
                view.copy_(t.detach())
            t.data = view  # the parameter now lives in the shared mapping
            if i >= first_dropped:  # a shared file's pages only leave this process's page
                # tables, their bytes stay
                region.drop(address, nbytes)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    message = {
        "t": "share",
        "device": "cpu",
        "files": sizes,
        "tensors": [
            {**entry, "file": file, "offset": offset}
            for entry, (file, offset) in zip(described, places, strict=True)
        ],
    }
    return message, fds


def drop_pages(tensors: Iterable["torch.Tensor"]) -> None:
    """In the child, after its hand-off: ``tensors``' pages (each one's, from the page its
    first byte is in) dropped from this process's page tables (``MADV_DONTNEED``): the memory
    file keeps their bytes and the job's cgroup its charge; the process's resident set counts
    them again once it reads them. Raises ``ValueError`` for a tensor not in a mapping of the
    hand-off (dropping a private page would lose its bytes)."""
    for t in tensors:
        begin, nbytes = t.data_ptr(), t.numel() * t.element_size()
        found = next((r for r in _HELD if r.holds(begin, nbytes)), None)
        if found is None:
            raise ValueError("a tensor not handed over cannot have its pages dropped")
        found.drop(begin, nbytes)


# ---------------------------------------------------------------- the supervisor's side


class Reader:
    """The parameters as the supervisor reads them: its own read-only mapping of the storage
    the child handed over (the files back to back, ``_Region``), each tensor's bytes in its file
    at its offset (and on through the next files where it spans them). Standard library only:
    the values are those ``instrument.flat`` gives (each widened exactly to a float, None where
    not finite)."""

    def __init__(self, region: _Region, expected: Layout, places: list[tuple[int, int]]) -> None:
        self._region = region
        self._shapes = [list(entry["shape"]) for entry in expected]
        self._parts = [
            (region.address(file, offset), _count(entry["shape"]), entry["dtype"])
            for entry, (file, offset) in zip(expected, places, strict=True)
        ]

    def snapshot(self) -> list[float | None]:
        """The values, as a flat list of floats (None where not finite)."""
        values: list[float] = []
        for address, count, dtype in self._parts:
            raw = ctypes.string_at(address, count * ITEM_SIZE[dtype])  # a copy, read at once
            if dtype == "bfloat16":  # the high half of a float32
                widened = b"".join(b"\0\0" + raw[i : i + 2] for i in range(0, len(raw), 2))
                values.extend(struct.unpack(f"<{count}f", widened))
            else:
                values.extend(memoryview(raw).cast(FORMATS[dtype]).tolist())  # type: ignore[call-overload]
        return [v if math.isfinite(v) else None for v in values]

    def tensors(self) -> list["torch.Tensor"]:
        """Torch's views of the mapping, read-only (its pages are: the supervisor never writes
        them); a kind that reads sampled places of them, ``hookstep.Sampled``. The mapping is
        held for the supervisor's life (nothing closes it while a view may be read)."""
        import torch

        views = []
        for address, count, dtype in self._parts:
            buffer = self._region.buffer(address, count * ITEM_SIZE[dtype])
            views.append(torch.frombuffer(buffer, dtype=getattr(torch, dtype), count=count))
        return [v.view(shape) for v, shape in zip(views, self._shapes, strict=True)]

    def close(self) -> None:
        self._region.close()


def _count(shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def _refuse(reason: str, **values: int | str) -> Interference:
    return Interference("protocol", message="share-refused", reason=reason, **values)


def check(message: dict[str, Any], expected: Layout) -> tuple[list[tuple[int, int]], list[int]]:
    """The hand-off's layout held to the one the kind asked for: the same tensors, in order,
    each of the same shape and dtype, in the files and at the offsets the supervisor computes
    itself, the files of the sizes it computes. Raises ``Interference`` (``share-refused``)
    where it is not."""
    tensors = message.get("tensors")
    if not isinstance(tensors, list) or len(tensors) > MAX_TENSORS:
        raise _refuse("tensors")
    if len(tensors) != len(expected):
        raise _refuse("count", sent=len(tensors), expected=len(expected))
    places, sizes = placement(expected)
    for i, (entry, want, (file, offset)) in enumerate(zip(tensors, expected, places, strict=True)):
        if not isinstance(entry, dict):
            raise _refuse("tensors")
        if entry.get("dtype") != want["dtype"]:
            raise _refuse("dtype", tensor=i, sent=str(entry.get("dtype"))[:40], expected=want["dtype"])
        if entry.get("shape") != want["shape"]:
            raise _refuse("shape", tensor=i)
        if entry.get("file") != file or entry.get("offset") != offset:
            raise _refuse("offset", tensor=i)
    if message.get("files") != sizes:
        raise _refuse("size")
    return places, sizes


def open_cpu(message: dict[str, Any], fds: list[int], expected: Layout) -> Reader:
    """Map the child's sealed memory files read-only, back to back (``_Region``), once the
    layout is checked; the descriptors are closed here whatever happens (the mappings hold the
    memory)."""
    try:
        places, sizes = check(message, expected)
        if len(fds) != len(sizes):
            raise _refuse("descriptors", sent=len(fds))
        for fd, size in zip(fds, sizes, strict=True):
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                raise _refuse("file")
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & SEALS != SEALS:
                raise _refuse("seals")
        region = _Region(fds, sizes, writable=False)
    finally:
        for fd in fds:
            os.close(fd)
    return Reader(region, expected, places)


# the seam: per device, how the child exports the storage and how the supervisor opens it
# ("cuda": CUDA IPC handles, built once a GPU can run its tests)
DEVICES = {"cpu": (export_cpu, open_cpu)}


def export(tensors: list["torch.Tensor"], dropped: int = 0) -> tuple[dict[str, Any], list[int]]:
    """The child's hand-off of ``tensors`` on their device (``DEVICES``); ``dropped``: of the
    last tensors, how many to leave out of this process's page tables (``export_cpu``)."""
    device = tensors[0].device.type if tensors else "cpu"
    if device not in DEVICES:
        raise ValueError(f"the parameters' storage cannot yet be shared from {device}")
    return DEVICES[device][0](tensors, dropped)


def open_shared(message: dict[str, Any], fds: list[int], expected: Layout) -> Reader:
    """The supervisor's side of a hand-off (``DEVICES``); ``Interference`` where refused."""
    device = message.get("device")
    if device not in DEVICES:
        for fd in fds:
            os.close(fd)
        raise _refuse("device", sent=str(device)[:40])
    return DEVICES[str(device)][1](message, fds, expected)
