"""Memory as the kernel accounts it (issue 41): what a pass on memory rests on.

The supervisor reads its child's resident set and high-water mark from /proc (VmRSS, VmHWM)
at every sync once the harness asked it to watch (``Observer.watch``, before the learner's file
runs) and every few milliseconds between syncs; the child's C allocator maps and unmaps every
block of 64 KiB or more on its own (``supervise.exact_malloc``), so the mark follows the tensors
alive. A memory-graded kind runs the learner's code between two syncs on inputs large enough that
the rise of that mark over the resident set at the first tells a right loop from a wrong one by
tens of MiB, where the child's own meters (which its code can reach and rewrite) only name the
mistake. Accumulation's one run is that run too (its parameters compared at every step): a kind
that runs the code a second time for its memory must make sure the two cannot be told apart, or
a loop behaves in each as it is graded there.
"""

import math
from typing import Any

import torch

from worker.checks import Interfered, snapshots, tensors
from worker.harness.observer import WATCH  # where the supervisor begins to read the child's memory

# the kernel's count of a process's pages is summed per CPU and wavers by some KiB between two
# readings; a high-water mark that fell by more was lowered by the process (/proc/self/clear_refs)
LOWERED = 4 * 1024 * 1024


def watched(seen: dict[str, Any]) -> bool:
    """Whether the supervisor read the child's memory: a forked child whose harness asked it to.
    On CUDA the learner's code runs in the supervisor's own process (``mode`` "inline"): no
    child to watch, and the device's memory is not the kernel's."""
    return seen.get("mode") == "fork"


def rise(seen: dict[str, Any], start: str, end: str) -> int:
    """How far the child's memory rose, at its peak, between the ``start`` sync and the first
    ``end`` sync after it: the highest figure the supervisor read by ``end`` minus the resident
    set at ``start``, or, where the job's cgroup was read too (``observer.Counters``) and rose
    more, its peak by ``end`` minus its bytes at ``start``: memory kept out of the process's
    pages (a file on the job's tmpfs, a pipe's buffer) is the job's all the same. Raises
    ``Interfered`` where the supervisor did not watch, the two syncs are missing, or the
    high-water mark was lowered."""
    rows = seen.get("memory")
    if not isinstance(rows, list):
        raise Interfered("missing", detail="the supervisor did not read the child's memory")
    lowered = seen.get("memory_lowered", 0)
    if not isinstance(lowered, int) or lowered > LOWERED:
        raise Interfered(
            "memory_lowered",
            {"lowered": int(lowered) if isinstance(lowered, int) else 0},
            "the child's high-water mark fell between two readings",
        )
    begun = None
    for row in rows:
        if not isinstance(row, list) or len(row) not in (4, 6):
            break
        label = row[0]
        if label == start:
            begun = row
        elif label == end and begun is not None:
            rss, peak = begun[2], row[3]
            if rss < 0 or peak < 0:
                break
            risen = peak - rss
            if len(row) == 6 and len(begun) == 6 and begun[4] >= 0 and row[5] >= 0:
                # the job's cgroup: what no resident set shows (tmpfs files, pipe buffers)
                risen = max(risen, row[5] - begun[4])
            return max(risen, 0)
    raise Interfered("missing", detail=f"no {start} then {end} in the supervisor's memory readings")


def since_watch(seen: dict[str, Any], end: str) -> int:
    """How far the child's memory rose, at its peak by the ``end`` sync, over its resident set as
    the learner's file began to load. A loop that holds memory across a memory run's start and
    frees it during the run (a ballast) lowers ``rise`` by that much, never this: a memory-graded
    kind bounds both (this one with an allowance for what a right loop holds from before its
    run: the maths run's tensors, torch's lazily loaded code, the learner's module)."""
    return rise(seen, WATCH, end)


def trained(
    seen: dict[str, Any], end: str, total: int, at: int, expected: torch.Tensor, travelled: float
) -> float:
    """How far the parameters the supervisor read at the ``end`` sync, from value ``at`` on, are
    from ``expected`` (the trusted run's), relative to ``travelled`` (how far that run moved
    them): a memory run that did not train as asked has no memory figure to go by. Infinity
    where the reading is missing or not ``total`` values long."""
    ends = snapshots(seen, end)
    if not ends or len(ends[0]) != total:
        return math.inf
    mine = tensors.vector(ends[0][at : at + expected.numel()]).nan_to_num()
    return tensors.norm(mine - expected) / travelled
