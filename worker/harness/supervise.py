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

This module: the supervisor, its child's start and end, the sweep. ``observer`` (what it
observes), ``link`` (the wire and the child's end of it), ``items`` (a dataset it serves) and
``childfilter`` (the child's seccomp filter) hold the rest. Standard library only: none of these
imports torch (``observer.Shared`` does, when a kind shares its parameters), so a supervisor and
its child run, and are tested (tests/supervisor/), without it.
"""

import contextlib
import functools
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any, NoReturn

from . import childfilter, linux, sharing
from .items import Items
from .link import HEADER, MAX_SYNC, UNANSWERED, Interference, Link, decode, recv_exact, recv_exact_fds
from .observer import MAX_EVENTS, WATCH, Observer, Shared
from .protocol import Message, Word

__all__ = [
    "MAX_EVENTS", "WATCH", "Death", "Died", "Hook", "Interference", "Items", "Link", "Observer", "Part",
    "Shared", "Supervisor", "exact_malloc", "harden", "sweep",
]  # fmt: skip

Hook = Callable[[Observer, int], None]  # the supervisor's at a sync of its label (``Api.on_sync``)
Part = Callable[[Link], bytes]  # what the child runs: the learner's part, returning its report
Death = tuple[str, int]  # ("signal", number) or ("exit", code): how a child ended unreported

SWEEP_ROUNDS = 200
# where the child's memory is watched, the kernel's figures are read at least this often (s):
# between two readings the high-water mark holds every peak, unless the child lowers it
MEMORY_POLL = 0.002
MALLOC_TRIM_THRESHOLD, MALLOC_MMAP_THRESHOLD = -1, -3  # glibc's mallopt options
EXACT_FROM = 64 * 1024
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


def harden() -> None:
    """Make this process's memory and descriptors unreachable from its children (not dumpable:
    the trace's memory file and "done" pipe are among them), deaf to every signal it can ignore
    (``IGNORED``: the child's SIGINT once made KeyboardInterrupt escape the supervision), and
    have its descendants' orphans come back to it, so that all of them can be ended. Raises if
    the kernel refuses any of it."""
    linux.not_dumpable()
    for number in IGNORED:
        signal.signal(number, signal.SIG_IGN)
    linux.become_subreaper()


def _stat(pid: int) -> tuple[int, bytes] | None:
    """``(ppid, state)`` of ``pid`` from /proc, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), fields[0]


def _descendants(me: int, spared: Collection[int]) -> list[int]:
    parents: dict[int, list[int]] = {}
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


def sweep(spared: Collection[int]) -> int:
    """Kill every descendant of this process but ``spared`` (children it had before the fork)
    and reap those that are its own, until none is left; how many outlived every round (0: all
    gone)."""
    me = os.getpid()
    pids = []
    for _ in range(SWEEP_ROUNDS):
        pids = _descendants(me, spared)
        if not pids:
            return 0
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            found = _stat(pid)
            if found is not None and found[0] == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.002)
    return len(pids)


def exact_malloc() -> None:
    """Have this process's C allocator (and its child's, forked after) map every block of 64 KiB
    or more on its own and unmap it when freed, instead of keeping freed memory for reuse: then
    the resident set the kernel accounts (``Observer.watch``) rises and falls with the tensors
    alive, and its high-water mark is their peak, not the allocator's history."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: the kernel's figures are only coarser
        return
    for option in (MALLOC_MMAP_THRESHOLD, MALLOC_TRIM_THRESHOLD):
        mallopt(option, EXACT_FROM)


def _children() -> set[int]:
    return set(_descendants(os.getpid(), set()))


class Supervisor:
    """Forks the child that runs ``part`` and serves its syncs until it reports or dies."""

    def __init__(
        self,
        shared: Shared | None,
        report_limit: int,
        items: Items | None = None,
        alone: bool = False,
        slow: tuple[list[str], float] | None = None,
        hooks: dict[str, Hook] | None = None,
        layout: sharing.Layout | None = None,
        reading: Callable[[list[Any], bool], Any] | None = None,
    ) -> None:
        self.observer = Observer(shared)
        # the parameters the child's set-up is to hand over (``sharing``), before anything else
        self.observer.layout = layout
        self.observer.reading = reading  # how the kind reads it, where not every value whole
        self.observer.slow = slow  # (labels, seconds), drawn once the child exists
        self.report_limit = report_limit
        self.alone = alone  # the child may start no thread or process (``childfilter``)
        self.items = items  # an ``Items`` server, opened anew at each "run" sync
        if items is not None:
            self.observer.hooks["run"] = items.open
        for label, hook in (hooks or {}).items():
            self.observer.hooks[label] = functools.partial(hook, self.observer)

    def run(self, part: Part) -> tuple[dict[str, Any] | None, Death | None]:
        """``part()`` in the child; returns ``(report, death)``: the child's report (a dict)
        or None, and how it ended when it did not report (``("signal", n)`` or ``("exit", n)``).
        Whatever happens here (an exception of ours included), the child and everything it
        started are killed and reaped before this returns or raises."""
        prepared = childfilter.prepare(self.alone)  # built here: a failure to is ours, raised here
        spared = _children()
        parent_end, child_end = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            parent_end.detach()
            _child(child_end, part, prepared)
        child_end.close()
        self.observer.child = pid
        report: dict[str, Any] | None = None
        self._status: int | None = None
        problem: Interference | None = None
        try:
            self.observer.draw_slow()
            with self._serving_items():
                report = self._serve(parent_end, pid)
        except Interference as exc:
            problem = exc
        except OSError as exc:
            problem = Interference("protocol", message="link-broke", error=type(exc).__name__)
        finally:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            if self._status is None:
                self._status = os.waitpid(pid, 0)[1]
            left = sweep(spared)
            parent_end.close()
        status, death = self._status, None
        assert status is not None  # waited for above
        if report is None and problem is None:
            death = (
                ("signal", os.WTERMSIG(status))
                if os.WIFSIGNALED(status)
                else ("exit", os.waitstatus_to_exitcode(status))
            )
        if problem is not None:
            self.observer.problem(problem.key, **problem.values)
        if left:
            self.observer.problem("processes", left=left)
        return report, death

    def _serve(self, sock: socket.socket, pid: int) -> dict[str, Any] | None:
        while True:
            ready, _, _ = select.select([sock], [], [], MEMORY_POLL if self.observer.watched else 0.2)
            self.observer.poll()
            if not ready:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    self._status = status
                    ready, _, _ = select.select([sock], [], [], 0)
                    if not ready:
                        return None
                continue
            # the hand-off's descriptor is taken with the first message only, while it is
            # awaited; any sent later is dropped by the kernel unread (a plain ``recv``)
            awaited = self.observer.layout is not None and self.observer.shared is None
            fds: list[int] = []
            if awaited:
                header, fds = recv_exact_fds(sock, HEADER.size, sharing.MAX_FILES)
            else:
                header = recv_exact(sock, HEADER.size)
            try:
                if header is None:
                    return None
                (size,) = HEADER.unpack(header)
                if size > self.report_limit:
                    raise Interference("protocol", message="too-large", bytes=size, limit=self.report_limit)
                raw = recv_exact(sock, size)
                if raw is None:
                    return None
                message = decode(raw)
                kind = message.get("t")
                if kind == Message.SHARE:
                    if not awaited:  # a second hand-off, or one no kind asked for: the learner's
                        again = self.observer.layout is not None
                        raise Interference("protocol", message="share-again" if again else "share-unasked")
                    if size > MAX_SYNC:
                        raise Interference("protocol", message="sync-too-large", bytes=size, limit=MAX_SYNC)
                    taken, fds = fds, []
                    assert self.observer.layout is not None  # awaited
                    self.observer.opened(sharing.open_shared(message, taken, self.observer.layout))
                    sock.sendall(Word.ANSWER)
                    continue
            finally:
                for fd in fds:
                    os.close(fd)
            if kind == Message.SYNC:
                if awaited:  # the set-up syncs nothing before its hand-off
                    raise Interference("protocol", message="share-first")
                if size > MAX_SYNC:
                    raise Interference("protocol", message="sync-too-large", bytes=size, limit=MAX_SYNC)
                self.observer.sync(message)
                if message.get("label") not in UNANSWERED:
                    sock.sendall(Word.ANSWER)
            elif kind == Message.REPORT:
                if awaited and message.get("error") is None:  # no parameters, and no failure said
                    self.observer.problem("protocol", message="share-missing")
                return message
            else:
                raise Interference("protocol", message="unknown-type")

    def inline(self, part: Part) -> tuple[dict[str, Any], None]:
        """``part()`` in this process (CUDA): the same syncs, observed from here."""
        self.observer.draw_slow()
        with self._serving_items():
            return decode(part(Link(observer=self.observer))), None

    @contextlib.contextmanager
    def _serving_items(self) -> Iterator[None]:
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


def _child(sock: socket.socket, part: Part, prepared: Any) -> NoReturn:
    """Keep stdin, stdout, stderr and the link; the usual signal dispositions back, a session
    of its own (no signal to the supervisor's process group reaches it, none of its reaches the
    supervisor), death with the supervisor, no capability, the filter ``prepared`` for it
    (``childfilter``: for an ``alone`` child, no thread or process from here on); run
    ``part(link)``; send its report; exit."""
    code = 0
    try:
        fd = sock.fileno()
        os.closerange(3, fd)
        os.closerange(fd + 1, 1 << 16)
        for number in IGNORED:
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        linux.die_with_parent(signal.SIGKILL)
        childfilter.guard(prepared)
        link = Link(sock)
        link.report(part(link))
    except BaseException:  # noqa: BLE001 (the harness's own failure: the supervisor sees no report)
        code = 71
    os._exit(code)


class Died(Exception):
    """The child ended without a report: ``death`` says how (``("signal", n)`` or
    ``("exit", n)``); it is a field of the trace (the worker reads the cause from it: a CPU
    limit's SIGXCPU, the OOM killer's SIGKILL, the learner's own exit code)."""

    def __init__(self, death: Death) -> None:
        super().__init__(f"the program ended by {death[0]} {death[1]}")
        self.death = death
