"""Run the course's claim proofs (lessons/<NN>-<slug>/proofs/*.py, listed in claims.yaml).

A proof is a small script that exits normally when its claim holds and raises (an assert) when it
does not. `prove()` runs a list of them in ONE child Python, so torch is imported once for the whole
set, each script as `__main__` in a fresh namespace, and reads back one JSON line per proof. The
web process never calls this; `treino lessons check` runs the CPU claims, `make gpu-check` is meant
to run the `device: cuda` ones on a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from app.lessons.course import Claim

MARK = "PROOF "  # a result line from the child: MARK + JSON
TIMEOUT_SECONDS = 300  # the whole set; it takes a few seconds


@dataclass(frozen=True)
class Proven:
    claim: Claim
    ok: bool
    seconds: float
    error: str = ""  # where and why it failed, one line


def prove(claims: list[Claim]) -> list[Proven]:
    """Run each claim's proof; a child that dies or hangs fails every proof it did not report."""
    if not claims:
        return []
    started = time.monotonic()
    try:
        child = subprocess.run(
            [sys.executable, "-m", "app.lessons.proofs", *(str(c.proof) for c in claims)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
        stdout, problem = child.stdout, f"the proof runner exited with status {child.returncode}"
        tail = child.stderr.strip().splitlines()[-1:] or [""]
        problem += f": {tail[0]}" if tail[0] else ""
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        stdout = out.decode() if isinstance(out, bytes) else out
        problem = f"the proofs took more than {TIMEOUT_SECONDS} s"
    reported: dict[str, dict[str, object]] = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK) :])
            reported[str(result["path"])] = result
    spent = time.monotonic() - started
    results = []
    for claim in claims:
        r = reported.get(str(claim.proof))
        if r is None:
            results.append(Proven(claim, False, spent, problem))
        else:
            results.append(Proven(claim, bool(r["ok"]), float(str(r["seconds"])), str(r["error"])))
    return results


def _run_one(path: Path) -> str:
    """Run one proof as __main__; '' when it holds, else where and why it failed."""
    import runpy
    import traceback

    try:
        runpy.run_path(str(path), run_name="__main__")
    except BaseException as e:  # a proof's SystemExit(0) is a pass, anything else a failure
        if isinstance(e, SystemExit) and e.code in (None, 0):
            return ""
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
        where = f"line {frames[-1].lineno}: {frames[-1].line}: " if frames else ""
        detail = str(e).strip().splitlines()
        return f"{where}{type(e).__name__}{': ' + detail[0] if detail else ''}"
    return ""


def _main(paths: list[str]) -> None:
    import warnings

    warnings.simplefilter("ignore")  # a proof asserts what it expects; other warnings are noise here
    for name in paths:
        started = time.monotonic()
        error = _run_one(Path(name))
        seconds = round(time.monotonic() - started, 3)
        result = {"path": name, "ok": not error, "seconds": seconds, "error": error}
        print(MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
