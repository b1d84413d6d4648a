"""A dataset the supervisor serves to its child (``supervise``), each item after a wait the
learner's code cannot shorten. Standard library only."""

import contextlib
import heapq
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any


class Items:
    """A dataset the supervisor serves: the child and every process it starts connect to
    ``address`` (an abstract Unix socket in the job's own network namespace) and ask for items
    by index (``!I``); each answer (a status byte, then ``make(seed, index)``) goes out
    ``seconds`` after the question came in, however many are asked at once. Each run (``open``)
    draws a new seed here, after the fork: items asked for before a run opened are another run's,
    and its data cannot be made without asking, in time the learner's code cannot shorten."""

    MAX_CONNECTIONS = 128
    MAX_PENDING = 8192
    MAX_ASKED = 4096  # the ask times kept, over all runs

    def __init__(self, count: int, seconds: float, make: Callable[[int, int], bytes], size: int) -> None:
        self.count, self.seconds, self._make, self._size = int(count), float(seconds), make, size
        self.address = b"\0treino-items-" + os.urandom(16).hex().encode()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(self.MAX_CONNECTIONS)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self.seeds: list[int] = []
        self.served: list[int] = []
        self.asked: list[list[float]] = []  # per run: when each item served was asked for (monotonic)
        self._thread: threading.Thread | None = None

    def open(self, _index: int | None = None) -> None:
        """A new run: a new seed, drawn now."""
        with self._lock:
            self.seeds.append(int.from_bytes(os.urandom(6), "big"))
            self.served.append(0)
            self.asked.append([])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="items", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
            self._thread.join(5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def result(self, origin: float) -> dict[str, list[Any]]:
        """Seeds and counts per run, and when each item was asked for, in ms since ``origin``
        (the observer's clock: ``Observer.now``)."""
        with self._lock:
            return {
                "seeds": [str(s) for s in self.seeds],
                "served": list(self.served),
                "asked": [[round((t - origin) * 1000, 3) for t in run] for run in self.asked],
            }

    def _answer(self, raw: bytes, asked: float) -> bytes:
        (index,) = struct.unpack("!I", raw)
        with self._lock:
            if not self.seeds or index >= self.count:
                return b"\1" + bytes(self._size)
            self.served[-1] += 1
            if sum(map(len, self.asked)) < self.MAX_ASKED:
                self.asked[-1].append(asked)
            seed = self.seeds[-1]
        return b"\0" + self._make(seed, index)

    def _serve(self) -> None:
        chosen = selectors.DefaultSelector()
        chosen.register(self._listener, selectors.EVENT_READ, "listener")
        chosen.register(self._wake_r, selectors.EVENT_READ, "wake")
        buffers: dict[socket.socket, bytes] = {}
        due: list[tuple[float, int, socket.socket, bytes]] = []  # (when, order, to whom, answer)
        order = 0
        while True:
            timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
            for key, _ in chosen.select(timeout):
                if key.data == "wake":
                    for conn in buffers:
                        conn.close()
                    chosen.close()
                    return
                if key.data == "listener":
                    with contextlib.suppress(OSError):
                        while True:
                            conn, _ = self._listener.accept()
                            if len(buffers) >= self.MAX_CONNECTIONS:
                                conn.close()
                                continue
                            conn.setblocking(False)
                            buffers[conn] = b""
                            chosen.register(conn, selectors.EVENT_READ, conn)
                    continue
                conn = key.data  # a client's socket (registered as its own data)
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk or len(due) >= self.MAX_PENDING:
                    chosen.unregister(conn)
                    conn.close()
                    del buffers[conn]
                    continue
                buffer = buffers[conn] + chunk
                asked = time.monotonic()
                while len(buffer) >= 4:
                    order += 1
                    heapq.heappush(due, (asked + self.seconds, order, conn, self._answer(buffer[:4], asked)))
                    buffer = buffer[4:]
                buffers[conn] = buffer
            now = time.monotonic()
            while due and due[0][0] <= now:
                _, _, conn, answer = heapq.heappop(due)
                if conn in buffers:
                    try:
                        sent = conn.send(answer)
                    except OSError:
                        sent = 0
                    if sent < len(answer):  # a client that does not read its answers: dropped
                        chosen.unregister(conn)
                        conn.close()
                        del buffers[conn]
