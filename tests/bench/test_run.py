"""The bench is not timed here; these only keep it from rotting unnoticed."""

import ctypes
import signal
import subprocess
import sys

from app.config import ROOT
from bench import report


def test_help_works_without_running_anything():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--submissions" in done.stdout


def test_the_report_puts_each_ratio_against_its_target():
    results = report.Results("gradient-accumulation/accumulate")
    metrics = {"sandbox_ms": 60, "check_ms": 2, "harness_run_ms": 40, "harness_import_ms": 0}
    results.add_ms("in-process", report.Samples([40.0, 42.0]))
    results.add_ms("cold", report.Samples([3000.0, 3100.0], [metrics, metrics]))
    results.add_ms("warm", report.Samples([80.0, 90.0], [metrics, metrics]))
    results.e2e["sqlite"] = [400.0, 500.0]
    results.pick_up["sqlite"] = [100.0, 150.0]
    results.rps[("lesson", "sqlite")] = 300.0
    results.rps[("static", "sqlite")] = 1000.0
    results.per_minute[1] = 20.0
    page = report.markdown({"cpu": "2 × test"}, results, [])
    rows = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines()}
    assert "met" in rows["warm ÷ in-process (p50)"] and "not met" not in rows["warm ÷ in-process (p50)"]
    assert "0.148" in rows["end-to-end p50 ÷ cold, SQLite"]  # 450 ms of 3050
    assert "**not met**" in rows["lesson page ÷ static file (req/s), SQLite"]


def test_the_report_has_the_class_at_once_table():
    from bench.load import Burst

    burst = Burst("sqlite", 100, post_ms=[100.0, 200.0, 1500.0], accepted_ms=[100.0, 1600.0], refused=2)
    burst.refused_ms = [5.0, 7.0]
    burst.graded = burst.queued = burst.passed = 100
    burst.all_graded_s = 42.0
    burst.quick_ms = {"lesson page": [20.0, 300.0], "progress JSON": [10.0]}
    results = report.Results("gradient-accumulation/accumulate")
    results.bursts.append(burst)
    page = report.markdown({"cpu": "2 × test"}, results, [])
    assert "## A class at once" in page
    row = next(line for line in page.splitlines() if line.startswith("| 100 | SQLite"))
    assert "0.20 / 1.50 / 1.50 s" in row and "1.60 s" in row and "2 (p50 5 ms)" in row
    assert "all graded in 42.0 s" in row and row.endswith("| 0.30 s |")


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM)


def test_the_in_process_floor_grades_the_solution_through_the_harness_as_it_is_today():
    """`make bench`'s first row calls the harness's runtime directly; a change of its entry point
    must not leave the bench broken until someone runs it."""
    from app.config import get_settings
    from app.lessons.course import load_course
    from bench import verdicts

    exercise = load_course(get_settings().lessons_dir).exercise("gradient-accumulation/accumulate")
    assert exercise is not None
    code = (ROOT / exercise.path / "solution.py").read_bytes()
    heard = {number: signal.getsignal(number) for number in SIGNALS}
    took, passed, failed = verdicts.in_process_once(exercise, code)
    # the memory run's figures are the host process's here: a child forked from a test session
    # that has run hundreds of tests can read more than a sandbox's job (a fresh clone's failed
    # so once); every other line is the harness's and the checks' own
    assert passed or set(failed) <= {"memory_kernel"}, failed
    mistake = (ROOT / exercise.path / "mistakes" / "loss-not-scaled.py").read_bytes()
    assert verdicts.in_process_once(exercise, mistake)[1] is False
    # the harness hardened a child, not this process: its signals are as they were (the
    # harness ignores these), and its orphans' zombies still go to init (a subreaper test
    # session once kept one, failing a later test)
    assert {number: signal.getsignal(number) for number in SIGNALS} == heard
    subreaper = ctypes.c_int(-1)
    assert ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(subreaper), 0, 0, 0) == 0
    assert subreaper.value == 0  # PR_GET_CHILD_SUBREAPER
