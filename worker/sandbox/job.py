"""One job, whichever launcher ran it (a single-use ``Sandbox`` or a fork of a template): the
request it is handed, and its result read back from the memory files the worker created and
holds. Everything that comes out of a job is untrusted input: the trace is read only once its
harness said it was complete, and parsed against its schema.

The hand-off: once ready, the job's harness (a warm sandbox's ``harness.run``, a fork's init) makes
a socket pair, sends one end to the worker with its word (``R``, ``P``), and waits on the other.
The worker takes it only if the kernel says that end was made by a process of the sandbox's own
tree and uid (``channel``), then makes the job's trace file and done pipe and sends them with
the request on it (``hand_over``). So nothing that ran before the hand-off holds either of them,
nor the channel they travel on: its maker was not dumpable when it made it (no /proc/<pid>/fd
reaches it), and a descriptor stolen from a warm sandbox during its exec window (its control
socket) carries neither; what such a thief could send instead (its own socket) is refused."""

import abc
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import stat
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

import psutil

from contracts.limits import Limits
from worker.harness import trace_schema
from worker.harness.protocol import Spec, Word
from worker.sandbox.watch import Cancel, wait_for_end

if TYPE_CHECKING:
    from worker.sandbox.cgroup import Cgroup

log = logging.getLogger("treino.sandbox")

TRACE_LIMIT = trace_schema.MAX_BYTES
INVALID_TRACE = "invalid-trace"  # Result.reason: the trace broke its schema (the job interfered)
INCOMPLETE_TRACE = "incomplete-trace"  # Result.reason: a trace with no "D" after it (the harness's)
SANDBOX_START = "sandbox-start"  # Result.reason: the sandbox failed before its job began (ours)
LIMIT_CAUSES = ("cpu", "memory", "file-size")  # a job's limits: what ended it, trace or none
UCRED = struct.Struct("iII")  # struct ucred: pid, uid, gid
HAND_OVER_SECONDS = 10  # sending the request: a harness that does not read it is not ready


@dataclass(frozen=True)
class Result:
    status: Literal["ok", "timeout", "crashed"]
    trace: dict | None  # the harness's trace; None unless status is "ok"
    wall_ms: int  # from hand-off to the job's end (its harness said done, or it ended): no warm-up
    output: str  # what reached the process's own stdout/stderr (capped)
    returncode: int | None
    reason: str = ""  # for "crashed": a short machine-readable cause
    start_ms: int = 0  # a forked job's: from asking its template for it to its sandbox being ready


def request(
    kind: str, spec: dict[str, Any], code: bytes, limits: Limits, device: str, cgroup: bool, **extra: object
) -> bytes:
    """The request a job's harness receives (``run.receive``; ``protocol.Request``): the spec,
    the code, its limits."""
    address_space = None if cgroup or device == "cuda" else limits.memory_mb
    caps = {"kind": kind, "output_limit": limits.output_kb * 1024, "trace_limit": TRACE_LIMIT}
    whole = cast(Spec, {**spec, **caps})
    return json.dumps(
        {
            "spec": whole,
            "code": code.decode("utf-8"),
            **extra,
            "limits": {
                "cpu_seconds": limits.cpu_seconds,
                "address_space_mb": address_space,
                # torch's allocator refuses past it at once; the watch here
                # (NVML) is the backstop for a job that lifts it
                "gpu_memory_mb": limits.memory_mb if device == "cuda" else None,
            },
        }
    ).encode("utf-8")


def descends(pid: int, ancestor: int, depth: int = 8) -> bool:
    """Whether ``pid`` is ``ancestor`` or its child, grandchild, … (at most ``depth`` down)."""
    for _ in range(depth + 1):
        if pid == ancestor:
            return True
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            return False
    return False


def receive_word(sock: socket.socket) -> tuple[bytes, socket.socket | None, tuple[int, int, int] | None]:
    """One word from a job's harness on ``sock`` (1 byte) with what the kernel attached to it:
    the socket it sent (SCM_RIGHTS; any other descriptor is closed) and its sender's credentials
    (SCM_CREDENTIALS, when ``sock`` has SO_PASSCRED)."""
    data, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(UCRED.size) + socket.CMSG_SPACE(4 * 4))
    channel, creds, fds = None, None, []
    for level, kind, payload in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_CREDENTIALS and len(payload) >= UCRED.size:
            creds = UCRED.unpack(payload[: UCRED.size])
        elif kind == socket.SCM_RIGHTS:
            fds += list(struct.unpack(f"{len(payload) // 4}i", payload[: len(payload) // 4 * 4]))
    for fd in fds:
        if channel is None and stat.S_ISSOCK(os.fstat(fd).st_mode):
            channel = socket.socket(fileno=fd)
        else:
            os.close(fd)
    return data, channel, creds


def channel_maker(channel: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` in this process's namespaces of the process that made ``channel``'s pair
    (SO_PEERCRED of a socket pair: its maker, recorded by the kernel, not claimed by anyone)."""
    pid, uid, _ = UCRED.unpack(channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, UCRED.size))
    return pid, uid


def hand_over(channel: socket.socket, data: bytes, counters: list[int] | None = None) -> tuple[int, int]:
    """The job's trace file and done pipe, made now, sent with the request on ``channel`` (which
    is closed after: the job gets no way back to the worker but the "D"); returns the worker's
    ends ``(trace, done)``. ``counters`` (``Cgroup.memory_counters``) go with them, and are
    closed here. A harness that does not take them is reported by the wait as a crash."""
    trace = os.memfd_create("treino-trace", os.MFD_CLOEXEC)
    done, theirs = os.pipe2(os.O_CLOEXEC)  # the harness writes "D" once the trace is in
    try:
        channel.settimeout(HAND_OVER_SECONDS)
        socket.send_fds(channel, [Word.HANDOFF], [trace, theirs, *(counters or [])])
        channel.sendall(data)
        channel.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # it died while warm; reported by the caller as a crash
    finally:
        for fd in (theirs, *(counters or [])):
            os.close(fd)
        channel.close()
    return trace, done


@dataclass(frozen=True)
class Ending:
    """How a job ended and where its result is: the wait's word (``watch.wait_for_end``, or
    "memory"/"cancelled"/"timeout"), the wall time from hand-off, the exit status, the memory
    files it wrote (its output from byte ``skip``: what came before is the warm-up's, ours), its
    cgroup (None where there was none) and a label for logs."""

    end: str
    wall_ms: int
    returncode: int | None
    output: int
    trace: int
    skip: int = 0
    cgroup: "Cgroup | None" = None
    label: str = ""


def _read_memfd(fd: int, limit: int) -> bytes | None:
    """At most ``limit`` bytes of a memory file; None if it holds more."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        return None
    return os.pread(fd, limit + 1, 0)


def _decode_capped(data: bytes, limit: int) -> str:
    text = data[:limit].decode("utf-8", "replace")
    return text + ("\n[output truncated]" if len(data) > limit else "")


def _cause(returncode: int | None) -> str:
    if returncode is not None and returncode > 128:  # bwrap reports a killed child as 128 + signal
        returncode = -(returncode - 128)
    if returncode is not None and returncode < 0:
        signum = -returncode
        if signum == signal.SIGXCPU:
            return "cpu"
        if signum == signal.SIGXFSZ:
            return "file-size"
        with contextlib.suppress(ValueError):
            return signal.Signals(signum).name
        return f"signal-{signum}"
    return "no-trace"


def result(ending: Ending, limits: Limits) -> Result:
    """The job's result from how it ended and what it left in its memory files. The trace is
    read only once its harness said it was complete (``end`` is "done": the supervisor writes
    ``D`` after the last byte of it) and is parsed as the untrusted input it is; a trace left
    without that word was never finished: a failure of the harness, not the learner's
    (``INCOMPLETE_TRACE``), unless a limit of the job's ended it."""
    end, wall_ms, returncode, cgroup = ending.end, ending.wall_ms, ending.returncode, ending.cgroup
    cap = limits.output_kb * 1024
    output = _decode_capped(os.pread(ending.output, cap + 1, ending.skip), cap)
    if end == "timeout":
        return Result("timeout", None, wall_ms, output, returncode)
    if end in ("memory", "cancelled"):
        return Result("crashed", None, wall_ms, output, returncode, end)
    raw = _read_memfd(ending.trace, TRACE_LIMIT)
    if end != "done" or not raw:
        cause = "memory" if cgroup and cgroup.oom_killed() else _cause(returncode)
        if end != "done" and raw != b"" and cause not in LIMIT_CAUSES:
            log.warning("sandbox %s: a trace without the harness's D (%s): not read", ending.label, cause)
            cause = INCOMPLETE_TRACE
        return Result("crashed", None, wall_ms, output, returncode, cause)
    try:
        trace = trace_schema.parse(raw, TRACE_LIMIT)
    except trace_schema.Invalid as exc:  # untrusted input: never handed to a check
        log.warning("sandbox %s: trace refused: %s", ending.label, exc)
        return Result("crashed", None, wall_ms, output, returncode, INVALID_TRACE)
    death = trace.get("death")
    if death is not None:  # the learner's program ended without a report: as if the job had
        died = -death["number"] if death["how"] == "signal" else death["number"]
        cause = "memory" if cgroup and cgroup.oom_killed() else _cause(died)
        return Result("crashed", None, wall_ms, output, died, cause)
    return Result("ok", trace, wall_ms, output, returncode)


@dataclass(frozen=True)
class Handoff:
    """A job ready to be handed over (``Job._ready``): the process whose end is the job's, the
    harness's channel, the output file and where the job's part of it starts (``skip``: before
    it, a warm sandbox's own), what the request adds (``extra``), and whether the time from
    asking for the job to now is reported (``timed``: a fork's ``start_ms``)."""

    pid: int
    channel: socket.socket
    output: int
    skip: int = 0
    extra: dict[str, object] = field(default_factory=dict)
    timed: bool = False


class Job(abc.ABC):
    """One job's handle, whichever launcher made it: a single-use ``Sandbox`` (a warm pool's,
    or cold) or a fork of a template (``worker.forkserver.ForkedJob``); ``worker.pool.Pool`` and
    ``worker.forkserver.ForkServer`` hand each job to one, and ``grading`` gets its ``Result``.
    Both hand the job over the same way (the request, with its trace file and done pipe made
    now, on the harness's channel), wait for its end the same way and read its result the same
    way (``run``); they differ in how the job gets ready (``_ready``), is killed (``kill``),
    tells how it ended (``_returncode``) and is closed (``close``)."""

    id: str
    device: str
    cgroup: "Cgroup | None"
    trace: int  # the job's trace file and done pipe, made at hand-off (-1 before)
    done: int

    def run(
        self, kind: str, spec: dict[str, Any], code: bytes, limits: Limits, cancel: Cancel | None = None
    ) -> Result:
        """Hand one job over and wait for its end (or ``cancel``), then kill what is left of it."""
        asked = time.monotonic()
        ready = self._ready(limits)
        if isinstance(ready, Result):
            return ready
        data = request(kind, spec, code, limits, self.device, self.cgroup is not None, **ready.extra)
        started = time.monotonic()
        counters = self.cgroup.memory_counters() if self.cgroup is not None else []
        self.trace, self.done = hand_over(ready.channel, data, counters)
        end = wait_for_end(
            ready.pid,
            self.done,
            limits.wall_seconds,
            limits.memory_mb * 1024 * 1024,
            cancel,
            self.cgroup is None,
            self.device == "cuda",
        )
        wall_ms = round((time.monotonic() - started) * 1000)
        self.kill()  # nothing in it runs again: the trace and the output stay as they are now
        returncode = self._returncode(end)
        ending = Ending(end, wall_ms, returncode, ready.output, self.trace, ready.skip, self.cgroup, self.id)
        done = result(ending, limits)
        return dataclasses.replace(done, start_ms=round((started - asked) * 1000)) if ready.timed else done

    @abc.abstractmethod
    def _ready(self, limits: Limits) -> Handoff | Result:
        """The job, ready for its request: confined (its cgroup's limits are ``limits``') and its
        harness's channel taken; or the ``Result`` of a failed start (ours)."""

    @abc.abstractmethod
    def _returncode(self, end: str) -> int | None:
        """How the job's process ended (``end``: the wait's word), once killed."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the job's whole tree."""

    @abc.abstractmethod
    def close(self) -> None:
        """Kill it (if still running) and free everything it held."""
