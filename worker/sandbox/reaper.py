"""After a job: its sandbox (or forked job) is closed at once on CUDA, where the next job must
find the GPU's memory free, else in the background: a torch process takes tens of milliseconds
to die, which no learner needs to wait for; ``reap_all`` waits for those (a worker stopping,
tests)."""

import threading
import time
from typing import Protocol

_reaping: set[threading.Thread] = set()
_reaping_lock = threading.Lock()


class Used(Protocol):
    """What is released after a job: a single-use ``Sandbox`` or a forked job."""

    id: str
    device: str

    def close(self) -> None: ...


def release(box: Used) -> None:
    """After its job: close a used sandbox (or forked job) at once on CUDA, where the next job
    must find the GPU's memory free, else in the background."""
    if box.device == "cuda":
        box.close()
    else:
        _reap(box)


def _reap(box: Used) -> None:
    """Close a used sandbox (wait for its killed tree, remove its cgroup) in the background."""

    def close() -> None:
        try:
            box.close()
        finally:
            with _reaping_lock:
                _reaping.discard(thread)

    thread = threading.Thread(target=close, name=f"treino-reap-{box.id}", daemon=True)
    with _reaping_lock:  # started before anyone can see it: reap_all joins only started threads
        _reaping.add(thread)
        thread.start()


def reap_all(timeout: float = 10) -> None:
    """Wait until every used sandbox of this process is gone (a worker stopping, tests)."""
    deadline = time.monotonic() + timeout
    while True:
        with _reaping_lock:
            pending = list(_reaping)
        if not pending or time.monotonic() > deadline:
            return
        for thread in pending:
            thread.join(max(0.0, deadline - time.monotonic()))
