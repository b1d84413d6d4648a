"""GPU memory per process, from the NVIDIA driver's management library (NVML), over ctypes.

The worker never creates a CUDA context of its own (a sandbox does, for its job), so it asks
NVML, which talks to the driver without one: how much device memory each running process
holds. No cgroup counts GPU memory, so this is how a job's tree is held to its memory limit on
a GPU (``sandbox.tree_memory``). Without the library (a CPU machine) every answer is 0.
"""

import ctypes
import functools
import logging

log = logging.getLogger("treino.nvml")


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2), as the _v3 query fills it
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


@functools.cache
def _library() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if lib.nvmlInit_v2() != 0:
        log.warning("nvml: the driver's library did not initialise: GPU memory is not watched")
        return None
    return lib


def used_by(pids: set[int]) -> int:
    """Device memory, in bytes, held by ``pids`` on every GPU this process can see."""
    return sum(used for pid, used in processes().items() if pid in pids) if pids else 0


def processes() -> dict[int, int]:
    """Every process holding a CUDA context on a GPU this process can see (host pids) → the
    device memory it holds, in bytes, summed over the GPUs; empty without the library."""
    lib = _library()
    if lib is None:
        return {}
    count = ctypes.c_uint()
    if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
        return {}
    found: dict[int, int] = {}
    for index in range(count.value):
        device = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(device)) != 0:
            continue
        size = ctypes.c_uint(64)
        infos = (_ProcessInfo * size.value)()
        if lib.nvmlDeviceGetComputeRunningProcesses_v3(device, ctypes.byref(size), infos) != 0:
            continue
        for info in infos[: size.value]:
            used = info.usedGpuMemory if info.usedGpuMemory != 2**64 - 1 else 0  # NOT_AVAILABLE
            found[info.pid] = found.get(info.pid, 0) + used
    return found
