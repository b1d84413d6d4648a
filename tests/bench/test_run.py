"""The bench is not timed here; these only keep it from rotting unnoticed."""

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
