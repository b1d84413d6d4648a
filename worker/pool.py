"""A warm pool of single-use sandboxes.

Each sandbox in the pool has already imported torch (and created its CUDA context) and waits
for one job; ``take`` hands out the readiest one and starts a replacement at once, which warms
up in the background (in its own process). A used sandbox is never reused. With size 0, or when
no pool is running, every job gets a cold sandbox: same launcher, same limits, just slower.

A process holds at most one running pool (``running``): the worker for its lifetime,
``treino lessons check`` and the test suite for theirs; ``run`` uses it when there is one.
"""

import contextlib
import threading
from collections.abc import Callable, Iterator

from worker import sandbox

_active: "Pool | None" = None


class Pool:
    def __init__(self, size: int, start: Callable[[], sandbox.Sandbox] = sandbox.start) -> None:
        self.size = max(0, size)
        self._start = start
        self._boxes: list[sandbox.Sandbox] = []
        self._lock = threading.Lock()
        self._closed = False
        self.fill()

    def _prune(self) -> None:
        for box in [b for b in self._boxes if not b.alive()]:
            box.close()  # died while waiting (killed, out of memory): never handed out
            self._boxes.remove(box)

    def fill(self) -> None:
        with self._lock:
            self._prune()
            while not self._closed and len(self._boxes) < self.size:
                self._boxes.append(self._start())

    def take(self) -> sandbox.Sandbox:
        """A sandbox for one job: a warm one if any, else the one nearest to warm, else cold."""
        with self._lock:
            self._prune()
            box = next((b for b in self._boxes if b.ready()), None)
            if box is None and self._boxes:
                box = self._boxes[0]  # started first: closer to warm than a new one
            if box is not None:
                self._boxes.remove(box)
        self.fill()
        return box if box is not None else self._start()

    def warm(self) -> int:
        """How many sandboxes are ready for a job now."""
        with self._lock:
            return sum(1 for box in self._boxes if box.ready())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            boxes, self._boxes = self._boxes, []
        for box in boxes:
            box.close()


@contextlib.contextmanager
def running(size: int | None = None) -> Iterator[Pool]:
    """This process's pool for the duration (``size`` defaults to ``TREINO_POOL_SIZE``)."""
    global _active
    if size is None:
        from app.config import get_settings

        size = get_settings().pool_size
    if _active is not None:
        raise RuntimeError("a pool is already running in this process")
    pool = Pool(size)
    _active = pool
    try:
        yield pool
    finally:
        _active = None
        pool.close()


def run(kind: str, job: dict, code: bytes, limits: sandbox.Limits) -> sandbox.Result:
    """Run one job in a sandbox from the running pool, or in a cold one."""
    pool = _active
    box = pool.take() if pool is not None else sandbox.start()
    result = box.run(kind, job, code, limits)
    if result.reason == "sandbox-start":  # it died warming up (ours, not the learner's): once more, cold
        result = sandbox.start().run(kind, job, code, limits)
    return result
