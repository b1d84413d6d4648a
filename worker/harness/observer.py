"""What the supervisor observes of its child (``supervise``): the parameters, moved into shared
memory before the fork and read there without the child's help, and every sync the child makes,
with the meters' counts it sends as they grow. Standard library only when imported: torch is
imported by ``Shared`` alone, when a kind shares its parameters, so the supervisor's core
(``supervise``, this ``Observer``, ``link``, ``items``) runs and is tested without it."""

import mmap
import os
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .link import Interference

if TYPE_CHECKING:
    import torch

    from .sharing import Layout, Reader

MAX_SNAPSHOTS = 256
MAX_EVENTS = 4096
MAX_METERS = 64
MAX_MEMORY = 1024
WATCH = "watch-memory"  # the sync that has the supervisor watch the child's memory
ALIGN = 64


def process_memory(pid: int) -> tuple[int, int] | None:
    """``(rss, hwm)``: the bytes of ``pid``'s resident set now and at its highest (VmRSS,
    VmHWM of /proc/PID/status, as the kernel accounts them), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    found = {}
    for line in raw.splitlines():
        key, _, value = line.partition(b":")
        if key in (b"VmRSS", b"VmHWM"):
            found[key] = int(value.split()[0]) * 1024
    if len(found) != 2:
        return None
    return found[b"VmRSS"], found[b"VmHWM"]


class Counters:
    """The memory the kernel charges to the job's cgroup, read through two descriptors the
    worker sent with the request (``Cgroup.memory_counters``): the bytes charged now and their
    peak. Unlike a process's resident set, they count what the job keeps in files of its tmpfs
    (/tmp, /dev/shm, /job), in pipe and socket buffers, in every process and thread of its tree.
    The supervisor starts the peak anew as it begins to watch (``restart``); where the kernel does
    not let it (a cgroup v2 before Linux 6.12), the peak is left out and the figures read now are
    the only ones."""

    def __init__(self, fds: list[int]) -> None:
        self.current = fds[0] if fds else -1
        self.peak = fds[1] if len(fds) > 1 else -1

    def restart(self) -> None:
        """Start the peak anew from the bytes charged now (v1's ``max_usage_in_bytes``, v2's
        ``memory.peak`` for this descriptor, written to)."""
        if self.peak < 0:
            return
        try:
            os.pwrite(self.peak, b"0\n", 0)
        except OSError:
            os.close(self.peak)
            self.peak = -1

    def read(self) -> tuple[int, int]:
        """``(now, peak)`` in bytes; -1 for a figure there is none of."""
        return _read_int(self.current), _read_int(self.peak)


def _read_int(fd: int) -> int:
    if fd < 0:
        return -1
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return -1


_COUNTERS: list[Counters] = []  # the job's, once received (``use_counters``)


def use_counters(fds: list[int]) -> None:
    """The job's cgroup's memory counters (``run.receive``), for every ``Observer`` from now on."""
    _COUNTERS[:] = [Counters(fds)] if fds else []


class Shared:
    """Tensors moved into one anonymous shared mapping of this process's: the child computes in
    it, the supervisor reads it without the child's help (inline on CUDA, where the set-up runs
    in the supervisor's process). With ``mapped``, ``tensors`` are already the supervisor's own
    views of the child's hand-off (``sharing.Reader.tensors``): nothing is copied, and a kind's
    reader of sampled places (``hookstep.Sampled``) reads them there."""

    def __init__(self, tensors: Iterable["torch.Tensor"], mapped: bool = False) -> None:
        import torch

        tensors = [t for t in tensors]
        if mapped:
            self._map = None
            self.views = tensors
            self.tensors = tensors
            return
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

    def mirror(self) -> None:
        """Copy tensors that could not live in the mapping (on a GPU) into it: inline mode only."""
        import torch

        with torch.no_grad():
            for t, view in zip(self.tensors, self.views, strict=True):
                if t.data_ptr() != view.data_ptr():
                    view.copy_(t.detach().to("cpu", view.dtype).reshape(view.shape))

    def snapshot(self) -> list[float | None]:
        """The values, as a flat list of floats (None where not finite)."""
        from .instrument import flat

        return flat(self.views) if self.views else []


class Observer:
    """What the supervisor saw: syncs by label, parameter snapshots, the meters' stream."""

    def __init__(self, shared: "Shared | Reader | None") -> None:
        # where the parameters are read: the child's hand-off (``sharing.Reader``), or a mapping
        # of this process's (inline on CUDA: ``hand_off_inline``)
        self.shared = shared
        self.layout: Layout | None = None  # the hand-off the kind asked for (``sharing``)
        # how a kind reads the hand-off where not every value whole (``Api.supervise``'s
        # ``reading``): called with the tensors and whether they are this process's mapped views
        self.reading: Callable[[list[Any], bool], Any] | None = None
        self.started = time.monotonic()
        self.counts: dict[str, int] = {}
        self.events: list[list[Any]] = []  # [label, index, ms, snapshot index or -1]
        self.events_dropped = 0
        self.snapshots: list[list[float | None]] = []
        self.meters: dict[int, dict[str, int]] = {}  # meter number → its counts and the peak seen
        # {"key", "values"}: what broke the protocol (link.Interference)
        self.problems: list[dict[str, Any]] = []
        # (labels, seconds): one label made slow per run, drawn after the fork
        self.slow: tuple[list[str], float] | None = None
        self.slowed: list[str] = []  # the label made slow in run 0, 1, …: its syncs are answered late
        # label → called with the index, before the parameters are read
        self.hooks: dict[str, Callable[[int], None]] = {}
        # [label, index, ms] the supervisor made itself (a hook's: the timing kind's device runs
        # here, its kernels' begin and end are its own), apart from the child's syncs: no label
        # the child sends can land here
        self.timeline: list[list[Any]] = []
        self.child: int | None = None  # the child's pid, once forked
        self.watched = False  # whether its memory is read (watch)
        # [label, index, rss, peak, charged, charged peak] at each sync once watched: the
        # kernel's bytes, of the child's resident set and of the job's cgroup (-1: none)
        self.memory: list[list[Any]] = []
        self.memory_peak = 0  # the most the child's resident set held, of every reading
        self.memory_lowered = 0  # the most its high-water mark fell between two readings
        self._hwm = 0
        self.counters = _COUNTERS[0] if _COUNTERS else None
        self.charged = self.charged_peak = -1  # the cgroup's bytes now and at their peak

    def hand_off_inline(self, tensors: list["torch.Tensor"]) -> None:
        """The hand-off inline (CUDA: the set-up ran in this process): the tensors, held to the
        layout asked for, mirrored into a mapping of this process's at each sync (``Shared``)."""
        from . import sharing

        if self.layout is None or self.shared is not None:
            raise Interference(
                "protocol", message="share-again" if self.layout is not None else "share-unasked"
            )
        if sharing.layout(tensors) != self.layout:
            raise Interference("protocol", message="share-refused", reason="layout")
        self.shared = self.reading(tensors, False) if self.reading is not None else Shared(tensors)

    def opened(self, reader: "Reader") -> None:
        """The hand-off, checked and mapped (``sharing.open_shared``): read as it is, or through
        the kind's ``reading`` over this process's read-only views of it."""
        self.shared = self.reading(reader.tensors(), True) if self.reading is not None else reader

    def watch(self) -> None:
        """From now on, read the child's memory from the kernel (``process_memory``) at every
        sync and at every ``poll`` (the supervisor's, at least every ``MEMORY_POLL`` s): its
        high-water mark, and its resident set as a floor where the child lowered that mark
        (``/proc/self/clear_refs``): how far it fell is kept (``memory_lowered``; the kernel's
        own count, summed per CPU, wavers by some KiB), for the checks. Asked by the harness with a
        ``WATCH`` sync before the learner's file is imported (so it cannot be left out)."""
        self.watched = self.child is not None
        if self.watched and self.counters is not None:
            self.counters.restart()
        self.poll()

    def poll(self) -> int:
        """One reading of the watched child's memory, its peak kept here; its resident set."""
        if not self.watched or self.child is None:
            return -1
        if self.counters is not None:
            self.charged, peak = self.counters.read()
            self.charged_peak = max(self.charged_peak, self.charged, peak)
        found = process_memory(self.child)
        if found is None:
            return -1
        rss, hwm = found
        self.memory_lowered = max(self.memory_lowered, self._hwm - hwm)
        self._hwm = hwm
        self.memory_peak = max(self.memory_peak, rss, hwm)
        return rss

    def draw_slow(self) -> None:
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

    def now(self) -> float:
        """Milliseconds since this observer began: the clock of ``events`` and ``timeline``."""
        return round((time.monotonic() - self.started) * 1000, 3)

    def mark(self, label: str, index: int, ms: float) -> None:
        """A ``timeline`` entry at ``ms`` (``now``'s clock), bounded as the events are."""
        if len(self.timeline) < MAX_EVENTS:
            self.timeline.append([label, index, round(ms, 3)])
        else:
            self.events_dropped += 1

    def problem(self, key: str, **values: int | str) -> None:
        """Note that the protocol was broken: ``key`` (an ``interfered.<key>`` of messages.yaml)
        and the numbers observed; the first is what the learner is told."""
        if len(self.problems) < 8:
            self.problems.append({"key": key, "values": values})

    def sync(self, message: dict[str, Any]) -> None:
        label, index = message.get("label"), message.get("index", -1)
        if not isinstance(label, str) or len(label) > 40 or not isinstance(index, int):
            raise Interference("protocol", message="sync-shape")
        meter = message.get("meter")
        if meter is not None:
            self._meter(meter)
        if label == "meter":
            return
        self.counts[label] = self.counts.get(label, 0) + 1
        if self.slow is not None and 0 <= index < len(self.slowed) and self.slowed[index] == label:
            time.sleep(self.slow[1])  # a slow phase: the supervisor's own time
        if label in self.hooks:
            self.hooks[label](index)
        if label == WATCH:
            self.watch()
        if self.watched:
            rss = self.poll()
            if len(self.memory) < MAX_MEMORY:
                self.memory.append([label, index, rss, self.memory_peak, self.charged, self.charged_peak])
        shot = -1
        if message.get("snapshot") and self.shared is not None and len(self.snapshots) < MAX_SNAPSHOTS:
            shot = len(self.snapshots)
            self.snapshots.append(self.shared.snapshot())
        if len(self.events) < MAX_EVENTS:
            self.events.append([label, index, self.now(), shot])
        else:
            self.events_dropped += 1

    def _meter(self, meter: object) -> None:
        """``[number, packed, freed]``: the bytes meter ``number`` ever counted in and out;
        both only grow, so live bytes are their difference and the peak is kept here. A fourth
        value is a note: 1, the meter saw work it could not count (interference); 2, a forward
        recomputed by torch's checkpoint, which saved in its place (counted as ``recomputed``)."""
        if (
            not isinstance(meter, list)
            or len(meter) not in (3, 4)
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in meter)
        ):
            raise Interference("protocol", message="meter-shape")
        number, packed, freed = meter[:3]
        if not 0 <= number < MAX_METERS:
            raise Interference("protocol", message="meter-number", meter=number, limit=MAX_METERS)
        state = self.meters.setdefault(number, {"peak": 0, "packed": 0, "freed": 0, "messages": 0})
        note = meter[3] if len(meter) == 4 else 0
        if note == 1:
            self.problem("meter_blind", meter=number)
        elif note == 2:
            state["recomputed"] = state.get("recomputed", 0) + 1
        if packed < state["packed"] or freed < state["freed"] or not 0 <= freed <= packed:
            self.problem(
                "meter_backwards",
                meter=number,
                packed=packed,
                freed=freed,
                packed_before=state["packed"],
                freed_before=state["freed"],
            )
        state["packed"], state["freed"] = packed, freed
        state["peak"] = max(state["peak"], packed - freed)
        state["messages"] += 1

    def result(self, final: list[float | None] | None) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "events": self.events,
            "events_dropped": self.events_dropped,
            "timeline": self.timeline,
            "snapshots": self.snapshots,
            "final_params": final,
            "meters": [self.meters.get(n) for n in range(max(self.meters, default=-1) + 1)],
            "interfered": list(self.problems) or None,
            "slowed": self.slowed,
            "memory": self.memory if self.watched else None,
            "memory_lowered": self.memory_lowered,
        }
