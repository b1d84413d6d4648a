"""measure-it's timing chart (issue 29, point 7): a median per configuration with its spread,
a fastest named only when its spread stays below every other's, and a caption that says what
the worker measured on (its CPU, or the GPU by name)."""

import pytest

from app import i18n
from app.submissions.figures import figures
from contracts.verdict import clear_winner

CONFIGS = ["fp32", "low", "accum", "checkpoint", "all"]


def measured(medians, spreads, *, on="cpu", timed=12):
    """The metrics a measure-it verdict holds: ``medians`` and ``(low, high)`` per configuration."""
    metrics = {"measured_on": on, "low_precision": "bfloat16", "device": "cuda" if on != "cpu" else "cpu"}
    for key, ms, (low, high) in zip(CONFIGS, medians, spreads, strict=True):
        metrics |= {
            f"{key}_ms_per_step": ms,
            f"{key}_ms_low": low,
            f"{key}_ms_high": high,
            f"{key}_timed_steps": timed,
            f"{key}_peak_bytes": 1000,
        }
    return metrics


def time_chart(metrics, lang="en"):
    i18n.set_lang(lang)
    try:
        return next(c for c in figures({"metrics": metrics}).charts if c.id == "configurations-time")
    finally:
        i18n.set_lang("en")


@pytest.mark.parametrize(
    ("timings", "winner"),
    [
        ([(1.0, 0.9, 1.1), (2.0, 1.8, 2.2)], 0),  # clearly apart
        ([(2.0, 1.8, 2.2), (1.0, 0.9, 1.1), (3.0, 2.5, 3.5)], 1),  # the lowest median wins, wherever it is
        ([(1.0, 0.8, 1.9), (2.0, 1.8, 2.2)], None),  # the fastest's top reaches the next one's bottom
        ([(1.5, 0.8, 17.7), (2.3, 2.0, 2.6)], None),  # a wide spread (a noisy CPU) names nobody
        ([(1.0, 0.9, 1.1), (5.0, 4.0, 6.0), (1.2, 1.05, 1.3)], None),  # beaten by one, not all
        ([(1.0, 1.0, 1.0), (1.0, 1.0, 1.0)], None),  # a tie
        ([(1.0, 0.9, 1.1)], None),  # nothing to beat
        ([], None),
    ],
)
def test_a_winner_only_beyond_the_spread(timings, winner):
    assert clear_winner(timings) == winner


def test_overlapping_spreads_name_no_fastest_and_show_every_spread():
    """bfloat16 between 1.5 and 17.7 ms across runs (issue 29): no label may say it is fastest."""
    chart = time_chart(
        measured([2.3, 2.2, 8.0, 5.9, 26.0], [(2.1, 2.6), (1.5, 17.7), (7.0, 9.0), (5.0, 7.0), (24.0, 30.0)])
    )
    assert [b.kind for b in chart.bars] == ["reference"] * 5, "no bar drawn as the winner"
    assert [(b.label, b.text, b.detail) for b in chart.bars][:2] == [
        ("float32", "2.30 ms", "2.10–2.60"),
        ("bfloat16", "2.20 ms", "1.50–17.70"),
    ]
    assert all(b.spread is not None and b.spread[0] <= b.share <= b.spread[1] for b in chart.bars)
    assert chart.bars[-1].spread[1] == 100.0, "the top of the highest spread sets the scale"
    assert chart.summary.startswith("No configuration was clearly fastest: bfloat16 had the lowest median")
    assert "overlaps that of float32" in chart.summary
    assert "fastest was" not in chart.summary


def test_a_clear_fastest_is_named_and_drawn_as_such():
    chart = time_chart(
        measured([2.3, 3.4, 8.0, 5.9, 26.0], [(2.1, 2.6), (3.0, 4.0), (7.0, 9.0), (5.0, 7.0), (24.0, 30.0)])
    )
    assert [b.kind for b in chart.bars] == ["yours", "reference", "reference", "reference", "reference"]
    assert chart.summary.startswith("The fastest was float32, at 2.30 ms per step")


def test_the_caption_says_the_cpu_and_never_a_gpu_that_was_not_there():
    metrics = measured(
        [2.3, 3.4, 8.0, 5.9, 26.0], [(2.1, 2.6), (3.0, 4.0), (7.0, 9.0), (5.0, 7.0), (24.0, 30.0)]
    )
    metrics["device"] = "cuda"  # the worker was set up for CUDA, but the harness measured on the CPU
    note = time_chart(metrics).note
    assert "this worker's CPU (it has no GPU" in note and "over 12 timed steps" in note
    assert "synchronised" not in note
    assert "CPU deste avaliador" in time_chart(metrics, "pt-BR").note


def test_the_caption_names_the_gpu_it_measured_on():
    metrics = measured(
        [0.5, 0.6, 1.9, 0.8, 2.4],
        [(0.49, 0.52), (0.58, 0.63), (1.8, 2.0), (0.75, 0.85), (2.3, 2.5)],
        on="NVIDIA H200",
    )
    chart = time_chart(metrics)
    assert chart.note.startswith("Median time per optimizer step on NVIDIA H200, synchronised at every step")
    assert chart.summary.startswith("The fastest was float32, at 0.50 ms per step")
    assert time_chart(metrics, "pt-BR").note.startswith(
        "Tempo mediano por passo do otimizador em NVIDIA H200"
    )


def test_a_verdict_from_before_the_spread_names_no_winner_and_no_gpu():
    """Stored verdicts hold one run's time per configuration: drawn, but nobody called fastest,
    and a CPU run is not said to be synchronised on a GPU whatever the worker's setting was."""
    metrics = {"measured_on": "cpu", "device": "cuda", "low_precision": "bfloat16"}
    metrics |= {
        f"{key}_ms_per_step": ms for key, ms in zip(CONFIGS, [2.3, 17.7, 8.0, 5.9, 26.0], strict=True)
    }
    chart = time_chart(metrics)
    assert [b.kind for b in chart.bars] == ["reference"] * 5
    assert all(b.detail == "" and b.spread is None for b in chart.bars)
    assert "synchronised" not in chart.note and "CPU" in chart.note
    assert chart.summary.startswith("float32 took the least time, 2.30 ms per step, in one timed run each")


def test_the_page_draws_each_spread_under_its_median(client, app):
    from tests.submissions.test_verdict import finished

    metrics = measured(
        [2.3, 2.2, 8.0, 5.9, 26.0], [(2.1, 2.6), (1.5, 17.7), (7.0, 9.0), (5.0, 7.0), (24.0, 30.0)]
    )
    verdict = {"version": 1, "exercise": "gpu-memory/measure-it", "status": "passed", "diagnosis": None}
    page = finished(app, client, verdict | {"checks": [], "metrics": metrics, "output": ""})
    figure = page.select_one("figure.figure-configurations-time")
    rows = figure.select("tbody tr")
    assert [r.select_one(".bar-detail").get_text() for r in rows][:2] == ["2.10–2.60", "1.50–17.70"]
    assert rows[1].select_one(".bar-value").get_text() == "2.20 ms1.50–17.70"  # two lines in one cell
    spread = rows[1].select_one("rect.bar-spread")
    assert (spread["x"], spread["width"]) == ("5.00", "54.00")
    assert not figure.select("tr.bar-yours"), "no configuration drawn as the fastest"
    assert "No configuration was clearly fastest" in figure.select_one(".figure-summary").get_text()
