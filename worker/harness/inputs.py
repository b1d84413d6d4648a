"""An exercise's inputs, made once by the worker and mapped by each of its jobs.

The accumulation exercises' micro-batches are large (71–100 MB: large enough for the kernel to
count one micro-batch's activations apart from two), and seeded: every job of an exercise draws
the same ones. Drawn in the job, they cost a learner about 0.1 s of fresh pages (about 1 ms per
MiB on a virtual machine) before the loop starts. So the worker draws them once
(``worker.checks.accumulation.job_inputs``, from the same seeded ``scenarios.build``), writes
them to a sealed memory file (``write``: no writing, shrinking or growing once sealed) and sends
each job a descriptor of it with the request (``worker/sandbox/job.hand_over``; ``run.receive``
keeps it here). The job's set-up, still trusted (before the learner's file loads), maps it
privately (``tensors``: a write makes the job's own copy, the file stays as it is) with every
page in place, so the kernel's count of the process holds them from before the learner's code,
as it held the pages drawn in the job, and closes the descriptor.

Nothing a pass rests on comes from here: the worker's checks compare the parameters the
supervisor read with a reference built from their own draw.
"""

import ctypes
import fcntl
import math
import mmap
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ALIGN = 64
MADV_POPULATE_READ = 22  # Linux 5.14: every page mapped in one call, none faulted one at a time
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
DTYPES = ("float64", "float32", "int64")

Layout = list[dict[str, Any]]  # [{"shape": [...], "dtype": "float64", "offset": n}], in order

# the mapping of the inputs a job received and their layout (``run.receive``), until taken
_received: tuple[mmap.mmap, Layout] | None = None


def write(tensors: list["torch.Tensor"]) -> tuple[int, Layout]:
    """The worker's: ``tensors`` (contiguous, on the CPU) in a new sealed memory file; its
    descriptor (close-on-exec) and their layout."""
    layout: Layout = []
    size = 0
    for t in tensors:
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise ValueError(f"inputs: {dtype} is not one of {DTYPES}")
        size = -(-size // ALIGN) * ALIGN
        layout.append({"shape": list(t.shape), "dtype": dtype, "offset": size})
        size += t.numel() * t.element_size()
    fd = os.memfd_create("treino-inputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, max(size, 1))
        for t, place in zip(tensors, layout, strict=True):
            whole = t.detach().contiguous()  # held while its bytes are read
            size_of = whole.numel() * whole.element_size()
            data = memoryview((ctypes.c_char * size_of).from_address(whole.data_ptr()))
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], place["offset"] + written)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd, layout


def keep(fd: int, layout: Layout) -> None:
    """``run.receive``'s: the job's inputs, mapped privately now and the descriptor closed (the
    supervisor's child closes every descriptor it inherits; the mapping goes with the fork,
    no page of it in place yet), until the set-up takes them."""
    global _received
    try:
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise RuntimeError("inputs: the memory file is not sealed")
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    _received = (mapped, layout)


def tensors() -> list["torch.Tensor"] | None:
    """The set-up's: the inputs this job received, every page put in place now (read-only
    until written: a write makes the process's own copy), as tensors over the mapping; None if
    none came."""
    global _received
    if _received is None:
        return None
    mapped, layout = _received
    _received = None
    import torch

    _populate(mapped)
    found = []
    for place in layout:
        dtype = getattr(torch, place["dtype"])
        shape = [int(n) for n in place["shape"]]
        if math.prod(shape) == 0:
            found.append(torch.empty(shape, dtype=dtype))
            continue
        flat = torch.frombuffer(mapped, dtype=dtype, count=math.prod(shape), offset=int(place["offset"]))
        found.append(flat.view(shape))
    return found


def _populate(mapped: mmap.mmap) -> None:
    """Every page of ``mapped`` in the process's page tables now (read-only until written), not
    at the loop's first touch, where the kernel would count it as the learner's."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(mapped))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(len(mapped)), MADV_POPULATE_READ) != 0:
        for offset in range(0, len(mapped), mmap.PAGESIZE):  # an older kernel: touched one by one
            mapped[offset]
