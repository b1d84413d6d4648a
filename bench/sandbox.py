"""Sandbox costs: start-up of bwrap vs a plain process, and hand-off -> verdict, cold vs warm.

    .venv/bin/python bench/sandbox.py [--runs 10] [--modes bwrap,process]

Cold: a sandbox started for the submission (it imports torch while the learner waits).
Warm: one from the pool, already warm when the submission arrives. Both are timed from the
call of ``grade`` to the verdict, on the accumulate exercise's reference solution.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch  # noqa: F401

from app.config import get_settings  # noqa: E402
from contracts.exercise import Exercise, load_exercises  # noqa: E402
from worker import pool, sandbox  # noqa: E402
from worker.grading import Grader  # noqa: E402


def p50(samples: list[float]) -> str:
    return (
        f"p50 {statistics.median(samples):7.1f} ms  "
        f"(min {min(samples):.1f}, max {max(samples):.1f}, n={len(samples)})"
    )


def _unhardened(command: list[str]) -> None:
    """bwrap as it ran before the hardening: the launcher's own uid (root's, here), no seccomp
    filter; for the cost of the uid switch, the private view and the filter."""
    args = sandbox._bwrap_args("cpu", None, os.getuid(), 0)
    cut = args.index("--seccomp")
    subprocess.run(
        [*args[:cut], *args[cut + 2 :], *command],
        env=sandbox._environment("/job"),
        check=True,
        stdin=subprocess.DEVNULL,
    )


def start_cost(runs: int) -> None:
    bare = [sys.executable, "-I", "-S", "-c", "pass"]
    launch = {  # bwrap as every sandbox gets it: its own uid when root, the seccomp filter
        "process": lambda: subprocess.run(bare, env={"PATH": "/usr/bin"}, check=True),
        "bwrap, no uid switch or filter": lambda: _unhardened(bare),
        "bwrap": lambda: sandbox.run_isolated(bare, timeout=30).check_returncode(),
    }
    times: dict[str, list[float]] = {k: [] for k in launch}
    for _ in range(runs):  # interleaved, to share the noise
        for name, start in launch.items():
            t = time.perf_counter()
            start()
            times[name].append((time.perf_counter() - t) * 1000)
    for name, samples in times.items():
        print(f"start, python -I -S -c pass, {name:30}: {p50(samples)}")


def verdicts(mode: str, runs: int, exercise: Exercise, code: bytes) -> None:
    setup = sandbox.setup(mode, "cpu")  # bwrap: refused, said why, where it cannot run
    start = lambda: sandbox.Sandbox(setup.isolation, "cpu")  # noqa: E731
    cold, warm = [], []
    with Grader(setup, pool.Pool(0, start=start)) as grader:  # each one cold
        for _ in range(runs):
            t = time.perf_counter()
            assert grader.grade(exercise, code)["status"] == "passed"
            cold.append((time.perf_counter() - t) * 1000)
    with Grader(setup, pool.Pool(1, start=start)) as grader:
        for _ in range(runs):
            while not grader.pool.warm():
                time.sleep(0.01)
            t = time.perf_counter()
            assert grader.grade(exercise, code)["status"] == "passed"
            warm.append((time.perf_counter() - t) * 1000)
    print(f"{mode:7} cold submission -> verdict: {p50(cold)}")
    print(f"{mode:7} warm submission -> verdict: {p50(warm)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--modes", default="bwrap,process")
    args = parser.parse_args()
    exercise = load_exercises(get_settings().lessons_dir).exercise("gradient-accumulation/accumulate")
    assert exercise is not None, "the course has lost the accumulate exercise"
    code = (Path(exercise.path) / "solution.py").read_bytes()
    start_cost(max(args.runs, 30))
    for mode in args.modes.split(","):
        verdicts(mode, args.runs, exercise, code)


if __name__ == "__main__":
    main()
