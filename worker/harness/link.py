"""The child's end of its link to the supervisor (``supervise``), and the wire both speak: a
length-prefixed message of strict JSON each way, bounded by the supervisor; and ``Interference``,
how the supervisor says the protocol was broken. Standard library only."""

import json
import os
import socket
import struct
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from .protocol import Sync, Word

if TYPE_CHECKING:
    import torch

    from .observer import Observer

HEADER = struct.Struct("!I")
MAX_SYNC = 64 * 1024  # one sync message


class Interference(Exception):
    """The child broke the protocol. ``key`` names what the supervisor saw (the trace's
    ``observed["interfered"]``, which the worker answers with ``interfered.<key>`` of
    messages.yaml: ``protocol``, ``shape``, ``processes``, ``meter_blind``,
    ``meter_backwards``); ``values`` are the numbers (or names) it observed, as data."""

    def __init__(self, key: str, **values: int | str) -> None:
        super().__init__(key, values)
        self.key, self.values = key, values


def send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)) + payload)


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_exact_fds(sock: socket.socket, n: int, max_fds: int) -> tuple[bytes | None, list[int]]:
    """``recv_exact``, with the descriptors passed along (``SCM_RIGHTS``) with its first bytes:
    the supervisor's read of the hand-off's header alone. More than ``max_fds`` descriptors (the
    kernel closes those that do not fit) is interference."""
    first, fds, flags, _ = socket.recv_fds(sock, n, max_fds + 1)
    if flags & socket.MSG_CTRUNC or len(fds) > max_fds:
        for fd in fds:
            os.close(fd)
        raise Interference("protocol", message="share-refused", reason="descriptors", sent=len(fds))
    if not first:
        for fd in fds:
            os.close(fd)
        return None, []
    rest = recv_exact(sock, n - len(first)) if len(first) < n else b""
    if rest is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return first + rest, fds


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def decode(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Interference("protocol", message="not-strict-json", error=type(exc).__name__) from None
    if not isinstance(value, dict):
        raise Interference("protocol", message="not-an-object")
    return value


# syncs the supervisor does not answer: a meter's counts, a modelled device's launch (timed as it
# arrives, as a GPU takes a launch without the host waiting for it)
UNANSWERED = frozenset({"meter", "launch"})


class Link:
    """The child's end: syncs (it waits for the supervisor's answer) and the final report."""

    def __init__(self, sock: socket.socket | None = None, observer: "Observer | None" = None) -> None:
        self._sock, self._observer = sock, observer  # a socket (forked) or the observer (inline)

    def sync(
        self, label: str, index: int = -1, snapshot: bool = False, meter: Sequence[int] | None = None
    ) -> None:
        message: Sync = {"t": "sync", "label": label, "index": int(index), "snapshot": bool(snapshot)}
        if meter is not None:
            message["meter"] = [int(v) for v in meter]
        if self._sock is None:
            assert self._observer is not None  # inline: the observer is this process's
            mirror = getattr(self._observer.shared, "mirror", None)  # inline: ``observer.Shared``
            if mirror is not None:
                mirror()
            self._observer.sync(dict(message))
            return
        send(self._sock, json.dumps(message).encode())
        if label not in UNANSWERED and recv_exact(self._sock, 1) != Word.ANSWER:
            os._exit(70)  # the supervisor is gone: nothing left to report to

    def share(self, tensors: Iterable["torch.Tensor"], dropped: int = 0) -> None:
        """The hand-off (``sharing``): the parameters' storage given to the supervisor, once, by
        the harness's ``set_up`` before the learner's file is loaded; waits until the supervisor
        has checked and mapped it (the last ``dropped`` tensors' pages left out of this
        process's page tables: ``sharing.export_cpu``). Inline (CUDA), this process's observer
        mirrors them (``observer.Shared``) after the same check."""
        tensors = list(tensors)
        if self._sock is None:
            assert self._observer is not None
            self._observer.hand_off_inline(tensors)
            return
        from . import sharing

        message, fds = sharing.export(tensors, dropped)
        payload = json.dumps(message).encode()
        wire = HEADER.pack(len(payload)) + payload
        try:
            sent = socket.send_fds(self._sock, [wire], fds)
        finally:
            for fd in fds:
                os.close(fd)
        self._sock.sendall(wire[sent:])
        if recv_exact(self._sock, 1) != Word.ANSWER:
            os._exit(70)  # the supervisor is gone, or refused it

    def meter(self, number: int, packed: int, freed: int, note: int = 0) -> None:
        """Meter ``number``'s running counts (bytes in, bytes out), sent as they change, with
        its ``note`` (``Observer._meter``) when it has one."""
        self.sync("meter", meter=(number, packed, freed, note) if note else (number, packed, freed))

    def report(self, payload: bytes) -> None:
        if self._sock is not None:
            send(self._sock, payload)
