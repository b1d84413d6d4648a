"""Waiting for a process tree to go quiet: a warm pool is full when its sandboxes are waiting.

Measurements start from the same state every time (every sandbox warm, nothing importing
torch), judged from the tree's own CPU time so that other load on the machine does not matter.
"""

import os
import time

TICK = os.sysconf("SC_CLK_TCK")
# what a sandbox's Python runs (python -m harness.run), or a fork server's (-m harness.template)
HARNESS = (b"harness.run", b"harness.template")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def tree(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and each of its descendants."""
    stats = {
        pid: s
        for name in os.listdir("/proc")
        if name.isdigit() and (s := _stat(pid := int(name))) is not None
    }
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats:
            found[pid] = stats[pid][1]
            frontier += [child for child, (parent, _) in stats.items() if parent == pid]
    return found


def sandboxes(pids) -> int:
    """How many of ``pids`` are sandboxed Pythons running the harness (a template's forked jobs
    carry its command line: they are counted too, and they are never quiet for long)."""
    count = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # bubblewrap's own two processes carry the same argv after theirs; count the Python
        count += not argv[0].endswith(b"bwrap") and any(arg.endswith(HARNESS) for arg in argv)
    return count


def wait_quiet(
    root: int,
    warm: int,
    *,
    include_root: bool = True,
    busy: float = 0.05,
    window: float = 0.4,
    timeout: float = 120,
) -> float:
    """Wait until ``root``'s tree holds ``warm`` harness processes and used under ``busy`` of a
    core over two windows in a row; the seconds waited (``timeout`` at most)."""
    started = time.monotonic()
    quiet = 0
    before = tree(root)
    while time.monotonic() - started < timeout:
        time.sleep(window)
        now = tree(root)
        counted = [p for p in now if include_root or p != root]
        used = sum(abs(now[p] - before.get(p, 0.0)) for p in counted)
        quiet = quiet + 1 if used < busy * window and sandboxes(counted) >= warm else 0
        if quiet >= 2:
            break
        before = now
    return time.monotonic() - started
