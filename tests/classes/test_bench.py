"""bench/class_report.py is not timed here; this only keeps it from rotting unnoticed."""

from bench import class_report
from tests.conftest import LESSONS


def test_the_class_bench_fills_a_class_and_reads_its_page_and_report(tmp_path):
    figures = class_report.measure(f"sqlite:///{tmp_path / 'bench.db'}", learners=4, runs=1, lessons=LESSONS)
    rows = figures["rows"]
    assert isinstance(rows, dict) and rows["submissions"] >= 4 * class_report.EXERCISES
    for name in ("page", "report"):
        measured = figures[name]
        assert isinstance(measured, dict) and measured["queries"] > 0 and measured["bytes"] > 0
