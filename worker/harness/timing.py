"""Harness of the "timing" kind (lesson 3): the learner times a training step honestly on a device
that runs behind Python, and runs the same-batch test.

The device is a stand-in for a GPU that any worker has: ``train_step(x)`` queues a "kernel" and
returns at once; a thread of the learner's process runs the queued kernels one after another;
``synchronize()`` waits until the queue is empty. Each kernel tells the supervisor when it begins
(``begin``) and when it ends (``kernel``), and the supervisor answers the end late in the run where
it made the device slow (``api.slow_one``: which run that is, it draws after the fork), so the
kernel's length is the supervisor's own time; the first ``warmup_kernels`` of each run take
``warmup_ms`` more, the one-off costs a real device pays (a context, the allocator, kernel
choices). The batches come from the supervisor's item server (``api.serve_items``), each
``item_ms`` after it is asked for, in time the learner's code cannot shorten. Every
``synchronize()`` is a sync the supervisor counts.

So the supervisor knows what an honest timer must find in each run: a step of the loop over the
loader takes max(loading, kernel), a step on one batch already on the device takes the kernel's
time, and the loader costs something only in the run where loading is the longer. The learner's
``time_training(train_step, loader, synchronize)`` returns what it measured; the checks
(``worker/checks/timing.py``) compare it with what the supervisor saw.
"""

import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from . import scenarios
from .instrument import name_limits
from .pipeline import ServedDataset

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api

MAX_BATCHES = 400
KEYS = ("step_ms", "spread_ms", "same_batch_ms", "bound")
MAX_TEXT = 40


class Device:
    """The kernels' queue and the thread that runs them (the learner's process)."""

    def __init__(self, sync: Callable[[str, int], object], run: int, params: Mapping[str, Any]) -> None:
        self._sync, self._run = sync, run
        self._kernel_s = float(params["kernel_ms"]) / 1000
        self._warmup_s = float(params["warmup_ms"]) / 1000
        self._warmup = int(params["warmup_kernels"])
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._pending = 0
        self._done = threading.Condition()
        self._launched = 0
        self._thread = threading.Thread(target=self._work, name="treino-device", daemon=True)
        self._thread.start()

    def launch(self, x: object) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError("train_step takes a batch the loader gave")
        with self._done:
            self._pending += 1
        self._queue.put(self._launched)
        self._launched += 1

    def _work(self) -> None:
        while True:
            number = self._queue.get()
            if number is None:
                return
            self._sync("begin", self._run)
            time.sleep(self._kernel_s + (self._warmup_s if number < self._warmup else 0.0))
            self._sync("kernel", self._run)  # answered late in the slow-device run
            with self._done:
                self._pending -= 1
                self._done.notify_all()

    def synchronize(self) -> None:
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)
        self._sync("synchronize", self._run)

    def close(self) -> None:
        """Wait for the queue to drain (not a sync the learner made), then end the thread."""
        with self._done:
            self._done.wait_for(lambda: self._pending == 0)
        self._queue.put(None)
        self._thread.join()


class Loader:
    """The batches, one item each, fetched from the supervisor's server as the loop asks."""

    def __init__(self, dataset: ServedDataset) -> None:
        self._dataset = dataset

    def __len__(self) -> int:
        return len(self._dataset)

    def __iter__(self) -> Iterator[torch.Tensor]:
        for index in range(len(self._dataset)):
            yield self._dataset[index][0].unsqueeze(0)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _answer(value: object) -> dict[str, Any]:
    """What the learner's function returned, as data: the four keys, numbers and a word."""
    if not isinstance(value, dict):
        return {"type": type(value).__name__[:MAX_TEXT]}
    spread = value.get("spread_ms")
    if isinstance(spread, list | tuple) and len(spread) == 2:
        spread = [_number(spread[0]), _number(spread[1])]
    else:
        spread = None
    bound = value.get("bound")
    return {
        "type": "dict",
        "step_ms": _number(value.get("step_ms")),
        "spread_ms": spread,
        "same_batch_ms": _number(value.get("same_batch_ms")),
        "bound": bound[:MAX_TEXT] if isinstance(bound, str) else None,
    }


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    runs = int(params["runs"])
    items = api.serve_items(
        MAX_BATCHES, float(params["item_ms"]) / 1000, scenarios.pipeline_item, scenarios.ITEM.size
    )
    # "kernel" slow in one run (the device is the bottleneck there), "idle" (never synced) in the other
    api.slow_one(["kernel", "idle"][:runs], float(params["slow_ms"]) / 1000)

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        lock = threading.Lock()

        def sync(label: str, index: int) -> None:
            with lock:
                api.sync(label, index)

        name_limits()
        fn = api.load_entry()
        api.check_signature(fn, ["train_step", "loader", "synchronize"])
        answers: list[dict[str, Any]] = []
        for number in range(runs):
            sync("run", number)  # a new seed for the items, and the run's start
            device = Device(sync, number, params)
            loader = Loader(ServedDataset(MAX_BATCHES, items.address))
            value, error = api.call_for_value(fn, [device.launch, loader, device.synchronize])
            device.close()
            answers.append(_answer(value))
            if error is not None:
                return {"runs": answers}, error
        return {"runs": answers}, None

    return api.supervise(learner)
