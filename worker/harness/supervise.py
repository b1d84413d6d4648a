"""Trusted measurement inside the sandbox (docs/security.md, "What is trusted and what is not").

The harness process is the **supervisor**: it builds the seeded scenario, puts the model's
parameters in shared memory, then forks the **child** that imports and runs the learner's code.
The child keeps stdin, stdout, stderr and one socket to the supervisor, nothing else (no trace or
done descriptor), and the supervisor is not dumpable (the child cannot open its
``/proc/<pid>/mem`` or ``/fd``; ptrace is refused by the filter too). The supervisor alone
writes the trace, after it has killed the child and everything the child started.

What the child says is *reported*; what the supervisor reads itself is *observed*:

- at every ``sync`` (a step taken, a batch fetched, a forward begun), the child waits while the
  supervisor copies the parameters out of the shared memory and notes the time and count;
- at the end, the parameters once more, with the child dead;
- the meters' figures as they grow (``Link.meter``), kept by the supervisor as they come.

A pass rests on observed values: writing the right parameters into that memory at the right
moments is computing them. The checks compare what the child reported with what was observed and
call any difference interference. On CUDA (a context created before the fork cannot be used by
the child) the learner's code runs in the supervisor's own process, as before: ``mode`` says
"inline", and the same syncs then observe from the same process.

Standard library and torch only.
"""

import contextlib
import ctypes
import heapq
import json
import mmap
import os
import select
import selectors
import signal
import socket
import struct
import threading
import time

import linux
import torch
from instrument import flat

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
HEADER = struct.Struct("!I")
MAX_SYNC = 64 * 1024  # one sync message
MAX_SNAPSHOTS = 256
MAX_EVENTS = 4096
MAX_METERS = 64
SWEEP_ROUNDS = 200
ALIGN = 64


class Interference(Exception):
    """The child broke the protocol; the message says how (it goes into the trace)."""


def _prctl(option, value):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def harden():
    """Make this process's memory and descriptors unreachable from its children (not dumpable:
    the trace's memory file and "done" pipe are among them), deaf to every signal it can ignore
    (``IGNORED``: the child's SIGINT once made KeyboardInterrupt escape the supervision), and
    have its descendants' orphans come back to it, so that all of them can be ended."""
    linux.not_dumpable()
    for number in IGNORED:
        signal.signal(number, signal.SIG_IGN)
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


class Shared:
    """Tensors moved into one anonymous shared mapping made before the fork: the child computes
    in it, the supervisor reads it without the child's help."""

    def __init__(self, tensors):
        tensors = [t for t in tensors]
        offsets, size = [], 0
        for t in tensors:
            size = -(-size // ALIGN) * ALIGN
            offsets.append(size)
            size += t.numel() * t.element_size()
        self._map = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        self.views = []
        for t, offset in zip(tensors, offsets, strict=True):
            view = torch.frombuffer(self._map, dtype=t.dtype, count=t.numel(), offset=offset)
            view = view.view(t.shape)
            with torch.no_grad():
                view.copy_(t.detach().cpu())
            if t.device.type == "cpu":
                t.data = view  # the parameter now lives in the shared mapping
            self.views.append(view)
        self.tensors = tensors

    def mirror(self):
        """Copy tensors that could not live in the mapping (on a GPU) into it: inline mode only."""
        with torch.no_grad():
            for t, view in zip(self.tensors, self.views, strict=True):
                if t.data_ptr() != view.data_ptr():
                    view.copy_(t.detach().to("cpu", view.dtype).reshape(view.shape))

    def snapshot(self):
        """The values, as a flat list of floats (None where not finite)."""
        return flat(self.views) if self.views else []


class Observer:
    """What the supervisor saw: syncs by label, parameter snapshots, the meters' stream."""

    def __init__(self, shared):
        self.shared = shared
        self.started = time.monotonic()
        self.counts = {}
        self.events = []  # [label, index, ms, snapshot index or -1]
        self.events_dropped = 0
        self.snapshots = []
        self.meters = {}  # meter number → its counts and the peak seen
        self.problems = []
        self.slow = None  # (labels, seconds): one label made slow per run, drawn after the fork
        self.slowed = []  # the label made slow in run 0, 1, …: its syncs are answered late
        self.hooks = {}  # label → called with the index, before the parameters are read

    def draw_slow(self):
        """Draw which label is slow in each run (sync index): a permutation of the labels, made
        here once the child exists, so that nothing in its memory tells."""
        if self.slow is None:
            return
        labels, seconds = self.slow
        order = list(labels)
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates on the kernel's randomness
            j = int.from_bytes(os.urandom(4), "big") % (i + 1)
            order[i], order[j] = order[j], order[i]
        self.slowed = order

    def problem(self, why):
        if len(self.problems) < 8:
            self.problems.append(str(why)[:200])

    def sync(self, message):
        label, index = message.get("label"), message.get("index", -1)
        if not isinstance(label, str) or len(label) > 40 or not isinstance(index, int):
            raise Interference("a sync message of the wrong shape")
        meter = message.get("meter")
        if meter is not None:
            self._meter(meter)
        if label == "meter":
            return
        self.counts[label] = self.counts.get(label, 0) + 1
        if 0 <= index < len(self.slowed) and self.slowed[index] == label:
            time.sleep(self.slow[1])  # a slow phase: the supervisor's own time
        if label in self.hooks:
            self.hooks[label](index)
        shot = -1
        if message.get("snapshot") and self.shared is not None and len(self.snapshots) < MAX_SNAPSHOTS:
            shot = len(self.snapshots)
            self.snapshots.append(self.shared.snapshot())
        if len(self.events) < MAX_EVENTS:
            self.events.append([label, index, round((time.monotonic() - self.started) * 1000, 3), shot])
        else:
            self.events_dropped += 1

    def _meter(self, meter):
        """``[number, packed, freed]``: the bytes meter ``number`` ever counted in and out;
        both only grow, so live bytes are their difference and the peak is kept here. A fourth
        value is a note: 1, the meter saw work it could not count (interference); 2, a forward
        recomputed by torch's checkpoint, which saved in its place (counted as ``recomputed``)."""
        if (
            not isinstance(meter, list)
            or len(meter) not in (3, 4)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in meter)
        ):
            raise Interference("a meter message of the wrong shape")
        number, packed, freed = meter[:3]
        if not 0 <= number < MAX_METERS:
            raise Interference("too many meters")
        state = self.meters.setdefault(number, {"peak": 0, "packed": 0, "freed": 0, "messages": 0})
        note = meter[3] if len(meter) == 4 else 0
        if note == 1:
            self.problem("tensors were saved for backward where the memory meter could not see them")
        elif note == 2:
            state["recomputed"] = state.get("recomputed", 0) + 1
        if packed < state["packed"] or freed < state["freed"] or not 0 <= freed <= packed:
            self.problem("the memory meter's counts went backwards")
        state["packed"], state["freed"] = packed, freed
        state["peak"] = max(state["peak"], packed - freed)
        state["messages"] += 1

    def result(self, final):
        return {
            "counts": self.counts,
            "events": self.events,
            "events_dropped": self.events_dropped,
            "snapshots": self.snapshots,
            "final_params": final,
            "meters": [self.meters.get(n) for n in range(max(self.meters, default=-1) + 1)],
            "interfered": "; ".join(self.problems) or None,
            "slowed": self.slowed,
        }


class Items:
    """A dataset the supervisor serves: the child and every process it starts connect to
    ``address`` (an abstract Unix socket in the job's own network namespace) and ask for items
    by index (``!I``); each answer (a status byte, then ``make(seed, index)``) goes out
    ``seconds`` after the question came in, however many are asked at once. Each run (``open``)
    draws a new seed here, after the fork: items asked for before a run opened are another run's,
    and its data cannot be made without asking, in time the learner's code cannot shorten."""

    MAX_CONNECTIONS = 128
    MAX_PENDING = 8192

    def __init__(self, count, seconds, make, size):
        self.count, self.seconds, self._make, self._size = int(count), float(seconds), make, size
        self.address = b"\0treino-items-" + os.urandom(16).hex().encode()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(self.MAX_CONNECTIONS)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._lock = threading.Lock()
        self.seeds, self.served = [], []
        self._thread = None

    def open(self, _index=None):
        """A new run: a new seed, drawn now."""
        with self._lock:
            self.seeds.append(int.from_bytes(os.urandom(6), "big"))
            self.served.append(0)

    def start(self):
        self._thread = threading.Thread(target=self._serve, name="items", daemon=True)
        self._thread.start()

    def close(self):
        if self._thread is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
            self._thread.join(5)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def result(self):
        with self._lock:
            return {"seeds": [str(s) for s in self.seeds], "served": list(self.served)}

    def _answer(self, raw):
        (index,) = struct.unpack("!I", raw)
        with self._lock:
            if not self.seeds or index >= self.count:
                return b"\1" + bytes(self._size)
            self.served[-1] += 1
            seed = self.seeds[-1]
        return b"\0" + self._make(seed, index)

    def _serve(self):
        chosen = selectors.DefaultSelector()
        chosen.register(self._listener, selectors.EVENT_READ, "listener")
        chosen.register(self._wake_r, selectors.EVENT_READ, "wake")
        buffers, due, order = {}, [], 0
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
                            chosen.register(conn, selectors.EVENT_READ, "conn")
                    continue
                conn = key.fileobj
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
                    heapq.heappush(due, (asked + self.seconds, order, conn, self._answer(buffer[:4])))
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


# seccomp, raw: the child's own filter, stacked on the sandbox's (docs/security.md)
# never, from the child: reaching into another process (the supervisor) or signalling by pidfd
NEVER = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp", "pidfd_send_signal")
ALONE = ("clone", "fork", "vfork")  # and clone3 (ENOSYS, so that the C library uses clone)
# refused where any clause holds, a clause being tests (argument, "==", "!=" or "&" (any of
# the value's bits set), value) that all hold, on the arguments' low words (ints to the kernel)
REFUSED = {
    # SIGSTOP to anyone: the one signal that stops the supervisor that it cannot ignore
    **{name: (((1, "==", signal.SIGSTOP),),) for name in ("kill", "tkill", "rt_sigqueueinfo")},
    **{name: (((2, "==", signal.SIGSTOP),),) for name in ("tgkill", "rt_tgsigqueueinfo")},
    # renicing, rescheduling or limits of any process but the caller itself (0; for
    # setpriority and ioprio_set, by process)
    "setpriority": (((0, "!=", 0),), ((1, "!=", 0),)),  # PRIO_PROCESS, itself
    "ioprio_set": (((0, "!=", 1),), ((1, "!=", 0),)),  # IOPRIO_WHO_PROCESS, itself
    **{
        name: (((0, "!=", 0),),)
        for name in ("prlimit64", "sched_setparam", "sched_setscheduler", "sched_setattr")
    },
    # a descriptor that signals a process on I/O: its owner (any process: the signal goes out
    # with the child's uid, past the rules above), the signal (SIGSTOP too) and O_ASYNC; the
    # descriptor calls Python and torch make (F_GETFL, F_SETFL without O_ASYNC, F_GETFD,
    # F_SETFD, F_DUPFD_CLOEXEC, locks, FIONREAD) stay allowed
    "fcntl": (
        ((1, "==", linux.F_SETOWN),),
        ((1, "==", linux.F_SETOWN_EX),),
        ((1, "==", linux.F_SETSIG),),
        ((1, "==", linux.F_SETFL), (2, "&", linux.O_ASYNC)),
    ),
    "ioctl": tuple(((1, "==", request),) for request in (linux.FIOSETOWN, linux.SIOCSPGRP, linux.FIOASYNC)),
}
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_CAPBSET_DROP, CAPABILITY_VERSION_3 = 24, 0x20080522
# the signals that would end or steer the supervisor and that it can ignore; the child gets
# their usual dispositions back (SIGCHLD stays: waitpid needs it; SIGXCPU and the faults stay:
# they are how a limit or a crash ends a run, and end the supervisor without a trace)
IGNORED = tuple(
    getattr(signal, name)
    for name in (
        "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
        "SIGPROF", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGIO", "SIGPWR", "SIGSTKFLT",
    )
    if hasattr(signal, name)
)  # fmt: skip


def program(arch, numbers, alone):
    """The child's filter, as ``(code, jt, jf, k)`` BPF instructions (see ``guard``)."""
    ld, jeq, jge, jset, ja, ret = 0x20, 0x15, 0x35, 0x45, 0x05, 0x06
    # a jump's targets are offsets (int) or labels (str), resolved at the end
    code: list[tuple[int, int | str, int | str, int | str]] = [
        (ld, 0, 0, 4),  # seccomp_data.arch
        (jeq, 1, 0, arch),
        (ja, 0, 0, "deny"),  # another ABI (i386 through int 0x80)
        (ld, 0, 0, 0),  # seccomp_data.nr
        (jge, "deny", 0, 0x40000000),  # x32 numbers
    ]
    labels: dict[str, int] = {}
    for name in (ALONE if alone else ()) + NEVER:
        if numbers[name] >= 0:
            code.append((jeq, "deny", 0, numbers[name]))
    if alone:
        code.append((jeq, "nosys", 0, numbers["clone3"]))

    def test(op: str, value: int, miss: str) -> tuple[int, int | str, int | str, int | str]:
        """Fall through where it holds, jump to the next clause (``miss``) where it does not."""
        if op == "&":
            return (jset, 0, miss, value)
        return (jeq, 0, miss, value) if op == "==" else (jeq, miss, 0, value)

    for name, clauses in REFUSED.items():
        code.append((jeq, 0, f"{name}:end", numbers[name]))  # the accumulator keeps nr past it
        for n, clause in enumerate(clauses):
            miss = f"{name}:{n + 1}"  # the next clause
            for arg, op, value in clause:
                code.append((ld, 0, 0, 16 + 8 * arg))  # seccomp_data.args[arg], its low word
                code.append(test(op, value, miss))
            code.append((ja, 0, 0, "deny"))
            labels[miss] = len(code)
        code.append((ja, 0, 0, "allow"))
        labels[f"{name}:end"] = len(code)
    labels |= {"allow": len(code), "deny": len(code) + 1, "nosys": len(code) + 2}
    code += [(ret, 0, 0, _RET_ALLOW), (ret, 0, 0, _RET_ERRNO | _EPERM), (ret, 0, 0, _RET_ERRNO | _ENOSYS)]

    def jump(target: int | str, i: int) -> int:
        return labels[target] - i - 1 if isinstance(target, str) else target

    resolved = [
        (op, jump(jt, i), jump(jf, i), jump(k, i) if op == ja else k)
        for i, (op, jt, jf, k) in enumerate(code)
    ]
    if not all(0 <= jt <= 255 and 0 <= jf <= 255 for _, jt, jf, _ in resolved):
        raise ValueError("a conditional jump of the child's filter is too long")  # one byte
    return resolved


def drop_capabilities():
    """None left, now or after an exec (the bounding set too): a child of a root supervisor (the
    process-only sandbox of a root worker) can then not override its not being dumpable."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if (
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() == 22
        ):  # EINVAL: past the last
            break
    header = struct.pack("Ii", CAPABILITY_VERSION_3, 0)
    data = ctypes.create_string_buffer(24)  # two zeroed {effective, permitted, inheritable}
    return libc.capset(ctypes.c_char_p(header), data) == 0


def guard(alone):
    """The child's own filter: it can stop, renice, reschedule, trace or read no other process,
    nor have a descriptor signal one (``NEVER``, ``REFUSED``: EPERM), and every call through
    another ABI fails (i386, x32: no training loop makes one). With ``alone``, no new thread or
    process either: ``clone``, ``fork`` and ``vfork`` fail with EPERM (Python: "can't start new
    thread", ``OSError`` from ``os.fork``), ``clone3`` with ENOSYS; the in-process meters see
    one thread (saved-tensor hooks and dispatch modes are per thread) of one process. False
    where this machine's architecture has no entry here or the filter could not be set."""
    if linux.MACHINE not in linux.AUDIT_ARCH:
        return False
    instructions = program(linux.AUDIT_ARCH[linux.MACHINE], linux.numbers(), alone)

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(instructions))(*[Filter(*f) for f in instructions])
    fprog = Program(len(instructions), filters)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), 0, 0, 0)
        return libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _send(sock, payload: bytes):
    sock.sendall(HEADER.pack(len(payload)) + payload)


def _recv_exact(sock, n):
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _refuse_constant(name):
    raise ValueError(f"non-finite number {name}")


def _decode(raw):
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Interference(f"a message that is not strict JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise Interference("a message that is not an object")
    return value


class Link:
    """The child's end: syncs (it waits for the supervisor's answer) and the final report."""

    def __init__(self, sock=None, observer=None):
        self._sock, self._observer = sock, observer  # a socket (forked) or the observer (inline)

    def sync(self, label, index=-1, snapshot=False, meter=None):
        message = {"t": "sync", "label": label, "index": int(index), "snapshot": bool(snapshot)}
        if meter is not None:
            message["meter"] = [int(v) for v in meter]
        if self._sock is None:
            if self._observer.shared is not None:
                self._observer.shared.mirror()
            self._observer.sync(message)
            return
        _send(self._sock, json.dumps(message).encode())
        if label != "meter" and _recv_exact(self._sock, 1) != b"k":
            os._exit(70)  # the supervisor is gone: nothing left to report to

    def meter(self, number, packed, freed, note=0):
        """Meter ``number``'s running counts (bytes in, bytes out), sent as they change, with
        its ``note`` (``Observer._meter``) when it has one."""
        self.sync("meter", meter=(number, packed, freed, note) if note else (number, packed, freed))

    def report(self, payload: bytes):
        if self._sock is not None:
            _send(self._sock, payload)


def _stat(pid):
    """``(ppid, state)`` of ``pid`` from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), fields[0]


def _descendants(me, spared):
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                parents.setdefault(found[0], []).append(int(entry))
    result, todo = [], [p for p in parents.get(me, []) if p not in spared]
    while todo:
        pid = todo.pop()
        result.append(pid)
        todo.extend(parents.get(pid, []))
    return result


def sweep(spared):
    """Kill every descendant of this process but ``spared`` (children it had before the fork)
    and reap those that are its own, until none is left; False if some outlived every round."""
    me = os.getpid()
    for _ in range(SWEEP_ROUNDS):
        pids = _descendants(me, spared)
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            found = _stat(pid)
            if found is not None and found[0] == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.002)
    return False


def _children():
    return set(_descendants(os.getpid(), set()))


class Supervisor:
    """Forks the child that runs ``part`` and serves its syncs until it reports or dies."""

    def __init__(self, shared, report_limit, items=None, alone=False, slow=None):
        self.observer = Observer(shared)
        self.observer.slow = slow  # (labels, seconds), drawn once the child exists
        self.report_limit = report_limit
        self.alone = alone  # the child may start no thread or process (``guard``)
        self.items = items  # an ``Items`` server, opened anew at each "run" sync
        if items is not None:
            self.observer.hooks["run"] = items.open

    def run(self, part):
        """``part()`` in the child; returns ``(report, death)``: the child's report (a dict)
        or None, and how it ended when it did not report (``("signal", n)`` or ``("exit", n)``).
        Whatever happens here (an exception of ours included), the child and everything it
        started are killed and reaped before this returns or raises."""
        spared = _children()
        parent_end, child_end = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            parent_end.detach()
            _child(child_end, part, self.alone)
        child_end.close()
        report, problem, self._status = None, None, None
        try:
            self.observer.draw_slow()
            with self._serving_items():
                report = self._serve(parent_end, pid)
        except Interference as exc:
            problem = str(exc)
        except OSError as exc:
            problem = f"the link broke ({type(exc).__name__})"
        finally:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if self._status is None:
                self._status = os.waitpid(pid, 0)[1]
            swept = sweep(spared)
            parent_end.close()
        status, death = self._status, None
        if report is None and problem is None:
            death = (
                ("signal", os.WTERMSIG(status))
                if os.WIFSIGNALED(status)
                else ("exit", os.waitstatus_to_exitcode(status))
            )
        if not swept:
            problem = problem or "processes the program started could not be stopped"
        if problem is not None:
            self.observer.problem(problem)
        return report, death

    def _serve(self, sock, pid):
        while True:
            ready, _, _ = select.select([sock], [], [], 0.2)
            if not ready:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self._status = status
                    ready, _, _ = select.select([sock], [], [], 0)
                    if not ready:
                        return None
                continue
            header = _recv_exact(sock, HEADER.size)
            if header is None:
                return None
            (size,) = HEADER.unpack(header)
            if size > self.report_limit:
                raise Interference(f"a message of {size} bytes")
            raw = _recv_exact(sock, size)
            if raw is None:
                return None
            message = _decode(raw)
            if message.get("t") == "sync":
                if size > MAX_SYNC:
                    raise Interference("a sync message too large")
                self.observer.sync(message)
                if message.get("label") != "meter":  # a meter's counts need no answer
                    sock.sendall(b"k")
            elif message.get("t") == "report":
                return message
            else:
                raise Interference("a message of no known type")

    def inline(self, part):
        """``part()`` in this process (CUDA): the same syncs, observed from here."""
        self.observer.draw_slow()
        with self._serving_items():
            return _decode(part(Link(observer=self.observer))), None

    @contextlib.contextmanager
    def _serving_items(self):
        """The items served from a thread of this process (started after the fork: the child
        gets no thread of ours, and no descriptor of the server's)."""
        if self.items is None:
            yield
            return
        self.items.start()
        try:
            yield
        finally:
            self.items.close()


def _child(sock, part, alone):
    """Keep stdin, stdout, stderr and the link; the usual signal dispositions back, a session
    of its own (no signal to the supervisor's process group reaches it, none of its reaches the
    supervisor), death with the supervisor, no capability, the ``guard`` filter (with
    ``alone``, no thread or process from here on); run ``part(link)``; send its report; exit."""
    code = 0
    try:
        fd = sock.fileno()
        os.closerange(3, fd)
        os.closerange(fd + 1, 1 << 16)
        for number in IGNORED:
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        drop_capabilities()
        if not guard(alone):
            raise RuntimeError("the child's filter could not be set")
        link = Link(sock)
        link.report(part(link))
    except BaseException:  # noqa: BLE001 (the harness's own failure: the supervisor sees no report)
        code = 71
    os._exit(code)


class Died(Exception):
    """The child ended without a report: ``death`` says how (``("signal", n)`` or
    ``("exit", n)``); it is a field of the trace (the worker reads the cause from it: a CPU
    limit's SIGXCPU, the OOM killer's SIGKILL, the learner's own exit code)."""

    def __init__(self, death):
        super().__init__(f"the program ended by {death[0]} {death[1]}")
        self.death = death
