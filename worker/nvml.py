"""GPU memory per process, from the NVIDIA driver's management library (NVML), through NVIDIA's
own bindings (nvidia-ml-py, module ``pynvml``: pure Python, ctypes over libnvidia-ml.so.1).

The worker never creates a CUDA context of its own (a sandbox does, for its job), so it asks
NVML, which talks to the driver without one: how much device memory each running process
holds. No cgroup counts GPU memory, so this is how a job's tree is held to its memory limit on
a GPU (``sandbox.tree_memory``). ``pynvml`` loads the driver's library only at ``nvmlInit``:
without it (a CPU machine) the import works and every answer is 0.
"""

import functools
import logging

import pynvml

log = logging.getLogger("treino.nvml")


@functools.cache
def _ready() -> bool:
    """NVML initialised, once per process; False without the driver's library."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return False
    except pynvml.NVMLError as exc:
        log.warning("nvml: the driver's library did not initialise (%s): GPU memory is not watched", exc)
        return False
    return True


def used_by(pids: set[int]) -> int:
    """Device memory, in bytes, held by ``pids`` on every GPU this process can see."""
    return sum(used for pid, used in processes().items() if pid in pids) if pids else 0


def processes() -> dict[int, int]:
    """Every process holding a CUDA context on a GPU this process can see (host pids) → the
    device memory it holds, in bytes, summed over the GPUs; empty without the library. A GPU
    NVML cannot answer for is passed over; memory NVML cannot tell (None) counts 0."""
    if not _ready():
        return {}
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError:
        return {}
    found: dict[int, int] = {}
    for index in range(count):
        try:
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            infos = pynvml.nvmlDeviceGetComputeRunningProcesses(device)
        except pynvml.NVMLError:
            continue
        for info in infos:
            found[info.pid] = found.get(info.pid, 0) + (info.usedGpuMemory or 0)
    return found
