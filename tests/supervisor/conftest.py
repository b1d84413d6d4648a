"""The supervisor's core (worker/harness/supervise.py with observer, link, items, childfilter and
linux) run without torch: each test's supervisor runs in a fresh interpreter of its own (it
makes itself a subreaper and kills its descendants: never pytest's) that never imports torch,
and neither does this directory, so these tests take a fork each, not an import of torch."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: the harness is the package worker.harness

REPORT = 'json.dumps({"t": "report", "data": {}, "error": None, "output": "", "dropped": 0}).encode()'


def supervised(body: str, alone: bool = False, layout: list | None = None) -> dict:
    """Run ``body`` (defines ``part(link)``, returning the report's bytes) in a child of a
    supervisor in a fresh interpreter; its observations, the report, how the child ended, and
    whether torch was imported on the way (never). With ``layout`` (``sharing.Layout``), the
    supervisor awaits the child's hand-off of parameters so laid out, and ``observed``'s
    ``final_params`` are what it reads from the child's mapping once the child is dead."""
    script = f"""
import json, os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import supervise
supervise.harden()
{body}
supervisor = supervise.Supervisor(
    None, 1 << 20, items=globals().get("items"), alone={alone}, layout={layout!r}
)
report, death = supervisor.run(part)
shared = supervisor.observer.shared
seen = supervisor.observer.result(shared.snapshot() if shared is not None else None)
seen["items"] = supervisor.items.result(supervisor.observer.started) if supervisor.items else None
print(json.dumps({{"observed": seen, "report": report, "death": death, "torch": "torch" in sys.modules}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["torch"] is False  # the supervisor's core is standard library only
    return out


# what a child's set-up does to hand its parameters over (``Link.share``, ``sharing.export_cpu``),
# made of the standard library: a sealed memory file of float64 values, its descriptor passed
# with the hand-off's message. ``hand_off(link, values)`` returns the child's mapping (writable)
# and whether the supervisor answered; ``message`` and ``fds`` replace what is sent
HAND_OFF = """
import fcntl, json, mmap, os, socket, struct
from worker.harness import sharing
from worker.harness.link import HEADER, recv_exact

def shared_file(values, seal=True):
    size = 8 * len(values)
    fd = os.memfd_create("parameters", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, sharing.SEALS)
    mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    mapped[:] = struct.pack(f"{len(values)}d", *values)
    return fd, mapped

def layout_message(values, dtype="float64", shape=None, size=None):
    return {"t": "share", "device": "cpu", "files": [8 * len(values) if size is None else size],
            "tensors": [{"shape": shape or [len(values)], "dtype": dtype, "file": 0, "offset": 0}]}

def hand_off(link, values, message=None, fds=None, seal=True):
    fd, mapped = shared_file(values, seal)
    payload = json.dumps(message or layout_message(values)).encode()
    socket.send_fds(link._sock, [HEADER.pack(len(payload)) + payload], [fd] if fds is None else fds)
    os.close(fd)
    return mapped, recv_exact(link._sock, 1) == b"k"

def write(mapped, values):
    mapped[:] = struct.pack(f"{len(values)}d", *values)
"""
LAYOUT3 = [{"shape": [3], "dtype": "float64"}]
