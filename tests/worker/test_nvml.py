"""worker/nvml.py over nvidia-ml-py: on a machine without the driver's library it imports and
answers 0 (the worker and the suite run on CPUs); with one, it sums each process's device memory
over the GPUs, passing over a GPU NVML cannot answer for. The real driver is read by
`make gpu-check` (bench/gpu.py: NVML's process list while a job holds device memory)."""

from types import SimpleNamespace

import pynvml
import pytest

from worker import nvml


@pytest.fixture
def fresh():
    nvml._ready.cache_clear()
    yield
    nvml._ready.cache_clear()


def test_without_the_drivers_library_every_answer_is_zero(fresh, monkeypatch, caplog):
    def missing() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    assert nvml.processes() == {}
    assert nvml.used_by({1, 2}) == 0
    assert not [r for r in caplog.records if r.name == "treino.nvml"]  # a CPU machine: nothing to say


def test_a_library_that_does_not_initialise_is_said_once(fresh, monkeypatch, caplog):
    calls = []

    def refused() -> None:
        calls.append(1)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", refused)
    assert nvml.processes() == {} and nvml.processes() == {}
    assert len(calls) == 1
    assert [r.getMessage() for r in caplog.records if r.name == "treino.nvml"] == [
        "nvml: the driver's library did not initialise (Driver Not Loaded): GPU memory is not watched"
    ]


def test_each_process_sums_its_memory_over_the_gpus(fresh, monkeypatch):
    listed = {
        0: [SimpleNamespace(pid=10, usedGpuMemory=300), SimpleNamespace(pid=11, usedGpuMemory=None)],
        1: None,  # NVML cannot answer for this one
        2: [SimpleNamespace(pid=10, usedGpuMemory=200), SimpleNamespace(pid=12, usedGpuMemory=7)],
    }

    def running(device: int) -> list:
        if listed[device] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return listed[device]

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 3)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda index: index)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses", running)
    assert nvml.processes() == {10: 500, 11: 0, 12: 7}
    assert nvml.used_by({10, 12, 99}) == 507
    assert nvml.used_by(set()) == 0
