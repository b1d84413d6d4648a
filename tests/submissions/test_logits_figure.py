"""chunked-loss's memory chart (lesson 6): the memory run's rise, as the kernel counted it, drawn
against the budget and the whole logits, and said in a sentence with the same numbers."""

from app import i18n
from app.submissions.figures import figures

MIB = 1 << 20


def test_the_rise_is_drawn_against_the_budget_and_the_whole_logits():
    metrics = {"logits_rise_bytes": 26 * MIB, "logits_limit_bytes": 48 * MIB, "whole_logits_bytes": 64 * MIB}
    i18n.set_lang("en")
    chart = next(c for c in figures({"metrics": metrics}).charts if c.id == "logits")
    assert [b.text for b in chart.bars] == ["26.0 MiB", "48.0 MiB", "64.0 MiB"]
    assert [b.kind for b in chart.bars] == ["yours", "reference", "naive"]
    assert chart.bars[2].share == 100 and chart.bars[0].share < chart.bars[1].share
    assert "26.0 MiB" in chart.summary and "64.0 MiB" in chart.summary


def test_no_chart_without_the_memory_run():
    assert not any(c.id == "logits" for c in figures({"metrics": {"batches": 3}}).charts)
