"""A warm pool of single-use sandboxes.

Each sandbox in the pool has already imported torch (and created its CUDA context) and waits
for one job; ``take`` hands out the readiest one. The pool's own thread starts every sandbox
in it: bubblewrap's --die-with-parent follows the thread that started a sandbox, so a sandbox
started by a short-lived thread (a request's, an executor's) would die with it. Once a job is
done ``run`` asks that thread for the replacement, which warms up while the verdict goes out:
the learner waits for neither, and the job does not share its cores with a torch import. A
used sandbox is never reused. With size 0, or when no pool is running, every job gets a cold
sandbox: same launcher, same limits, just slower.

A pool belongs to a ``grading.Grader`` (the worker's for its lifetime, `treino check`'s and
`treino lessons check`'s for theirs); ``run`` is how a job gets a sandbox.
"""

import logging
import threading
from collections.abc import Callable
from typing import Any

from contracts.limits import Limits
from worker import sandbox

log = logging.getLogger("treino.pool")


class Starter:
    """What keeps sandboxes started from a thread of its own (a ``Pool``, a fork server) shares:
    a failed start is said, its error kept for whoever waits for the first one, and tried again
    after a pause."""

    _changed: threading.Condition
    _error: BaseException | None
    _start: Callable[[], sandbox.Sandbox]

    def _try_start(self, what: str) -> sandbox.Sandbox | None:
        try:
            return self._start()
        except Exception as exc:  # e.g. out of processes: said, and tried again
            log.error("cannot start %s: %s", what, exc)
            with self._changed:
                self._error = self._error or exc
                self._changed.notify_all()
                self._changed.wait(timeout=5)
            return None


class Pool(Starter):
    def __init__(self, size: int, start: Callable[[], sandbox.Sandbox]) -> None:
        """Start filling the pool; returns once its sandboxes are started (not yet warm)."""
        self.size = max(0, size)
        self._start = start
        self._boxes: list[sandbox.Sandbox] = []
        self._out = 0  # taken for a job not yet done: replaced once it is
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._error: BaseException | None = None
        self._keeper = threading.Thread(target=self._keep_full, name="treino-pool", daemon=True)
        self._keeper.start()
        with self._changed:
            while len(self._boxes) < self.size and self._error is None:
                self._changed.wait()
            if self._error is not None:  # the first start failed: no pool, no thread left trying
                self._closed = True
                self._changed.notify_all()
                raise self._error

    def _prune(self) -> None:
        for box in [b for b in self._boxes if not b.alive()]:
            box.close()  # died while waiting (killed, out of memory): never handed out
            self._boxes.remove(box)

    def _keep_full(self) -> None:
        """The pool's thread: start a sandbox whenever one is missing; look again every second
        for ones that died waiting."""
        while True:
            with self._changed:
                while True:
                    self._prune()
                    if self._closed or len(self._boxes) + self._out < self.size:
                        break
                    self._changed.wait(timeout=1)
                if self._closed:
                    return
            box = self._try_start("a sandbox for the pool")
            if box is None:
                continue
            with self._changed:
                if not self._closed:
                    self._boxes.append(box)
                    self._error = None
                    self._changed.notify_all()
                    continue
            box.close()
            return

    def take(self) -> sandbox.Sandbox:
        """A sandbox for one job: a warm one if any, else the one nearest to warm, else cold.
        The pool is topped up when the caller says so (``refill``), once its job is done."""
        with self._lock:
            self._prune()
            box = next((b for b in self._boxes if b.ready()), None)
            if box is None and self._boxes:
                box = self._boxes[0]  # started first: closer to warm than a new one
            if box is not None:
                self._boxes.remove(box)
            self._out += 1
        return box if box is not None else self._start()

    def run(
        self,
        kind: str,
        spec: dict[str, Any],
        code: bytes,
        limits: Limits,
        cancel: sandbox.Cancel | None = None,
    ) -> sandbox.Result:
        """Run one job in a sandbox of this pool (a cold one if none is warm)."""
        try:
            result = self.take().run(kind, spec, code, limits, cancel)
            if result.reason == sandbox.SANDBOX_START:  # it died warming up (ours, not the learner's)
                result = self._start().run(kind, spec, code, limits, cancel)  # once more, cold
            return result
        finally:
            self.refill()

    def refill(self) -> None:
        """A taken sandbox's job is done: have the pool's thread replace it."""
        with self._changed:
            self._out -= 1
            self._changed.notify_all()

    def warm(self) -> int:
        """How many sandboxes are ready for a job now."""
        with self._lock:
            return sum(1 for box in self._boxes if box.ready())

    def close(self) -> None:
        with self._changed:
            self._closed = True
            boxes, self._boxes = self._boxes, []
            self._changed.notify_all()
        for box in boxes:
            box.close()
        self._keeper.join(timeout=30)
