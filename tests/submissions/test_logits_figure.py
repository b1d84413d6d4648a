"""chunked-loss's memory chart (lesson 6): the memory run's rise, as the kernel counted it, drawn
against the budget and the whole logits, and said in a sentence with the same numbers. The kind
declares it (``contracts.verdict.chart``, its texts in messages.d/chunked.yaml): the page draws
any kind's declared chart with nothing of that kind in app/."""

from app import i18n
from app.submissions.figures import figures
from contracts.verdict import chart

MIB = 1 << 20


def test_the_rise_is_drawn_against_the_budget_and_the_whole_logits():
    bars = [("yours", "yours", 26 * MIB), ("budget", "reference", 48 * MIB), ("whole", "naive", 64 * MIB)]
    metrics = {"charts": [chart("logits", "bytes", bars)]}
    i18n.set_lang("en")
    drawn = next(c for c in figures({"metrics": metrics}).charts if c.id == "logits")
    assert [b.label for b in drawn.bars] == ["Yours", "Budget", "Whole logits"]
    assert [b.text for b in drawn.bars] == ["26.0 MiB", "48.0 MiB", "64.0 MiB"]
    assert [b.kind for b in drawn.bars] == ["yours", "reference", "naive"]
    assert drawn.bars[2].share == 100 and drawn.bars[0].share < drawn.bars[1].share
    assert "26.0 MiB" in drawn.summary and "64.0 MiB" in drawn.summary
    i18n.set_lang("pt-BR")
    try:
        drawn = next(c for c in figures({"metrics": metrics}).charts if c.id == "logits")
    finally:
        i18n.set_lang("en")
    assert drawn.title == "O pico dos logits" and "26,0 MiB" in drawn.summary


def test_a_chart_whose_texts_are_gone_is_left_out_not_a_broken_page():
    metrics = {"charts": [chart("no-such-chart", "bytes", [("yours", "yours", 1.0)]), {"id": 3}]}
    assert not figures({"metrics": metrics}).charts


def test_no_chart_without_the_memory_run():
    assert not any(c.id == "logits" for c in figures({"metrics": {"batches": 3}}).charts)
