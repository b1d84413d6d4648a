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


def supervised(body: str, alone: bool = False) -> dict:
    """Run ``body`` (defines ``part(link)``, returning the report's bytes) in a child of a
    supervisor (no shared parameters) in a fresh interpreter; its observations, the report, how
    the child ended, and whether torch was imported on the way (never)."""
    script = f"""
import json, os, sys, time
sys.path.insert(0, {str(ROOT)!r})
from worker.harness import supervise
supervise.harden()
{body}
supervisor = supervise.Supervisor(None, 1 << 20, items=globals().get("items"), alone={alone})
report, death = supervisor.run(part)
seen = supervisor.observer.result(None)
seen["items"] = supervisor.items.result(supervisor.observer.started) if supervisor.items else None
print(json.dumps({{"observed": seen, "report": report, "death": death, "torch": "torch" in sys.modules}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["torch"] is False  # the supervisor's core is standard library only
    return out
