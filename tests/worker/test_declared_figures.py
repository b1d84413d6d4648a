"""Issue 47: each check kind declares its charts and facts (``contracts.verdict``), the page draws
any kind's from that, and a verdict stored before (its kind's metrics alone) reads as declared
(``contracts.old_charts``): for every kind, the page is the same either way, in both languages."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from app import i18n
from app.submissions.figures import figures
from worker.checks import accumulation, adapter, amp, hookstep, measure, timing

ROOT = Path(__file__).resolve().parents[2]


def same_page(metrics: dict) -> None:
    """The declared figures of ``metrics`` are drawn, and are what its old keys alone give."""
    assert "charts" in metrics and "facts" in metrics
    stored_before = {k: v for k, v in metrics.items() if k not in ("charts", "facts")}
    for lang in ("en", "pt-BR"):
        i18n.set_lang(lang)
        try:
            new, old = figures({"metrics": metrics}), figures({"metrics": stored_before})
        finally:
            i18n.set_lang("en")
        assert new == old, lang
    assert new.charts or new.facts


def _accumulation_metrics(steps, expected, median, peak, micro, whole) -> dict:
    ref = SimpleNamespace(micro_peak=micro, cycle_peak=whole)
    return {
        "optimizer_steps": steps,
        "reference_optimizer_steps": expected,
        "update_ratio": None if median is None else round(median, 4),
        "peak_activation_bytes": peak,
        "reference_peak_activation_bytes": micro,
        "large_batch_peak_activation_bytes": whole,
        **accumulation._figures(steps, peak, expected, median, ref),
    }


@pytest.mark.parametrize(
    "numbers",
    [
        (3, 3, 1.0, 58_324, 58_324, 233_296),  # right: facts, and the memory drawn against the whole
        (12, 3, 4.00004, 233_296, 58_324, 233_296),  # every micro-batch stepped, 4× each update
        (1, 1, 1.004, 58_324, 58_000, 233_296),  # 1.00× as the language writes it: a fact
        (3, 3, None, None, 58_324, 233_296),  # no peak to show (a blind meter)
    ],
)
def test_accumulation(numbers):
    same_page(_accumulation_metrics(*numbers))


@pytest.mark.parametrize("losses", [[1.0873, 1.0772, 1.0701], [1.0, 1.0], [0.5, None], [2.0]])
def test_accumulation_plain_run(losses):
    metrics = {"optimizer_steps": len(losses) - 1, "peak_activation_bytes": 12_345, "losses": losses}
    same_page(metrics | accumulation._figures(len(losses) - 1, 12_345, losses=losses))


def test_mixed_precision_steps_are_a_fact():
    metrics = {"optimizer_steps": 7, "charts": [], "facts": [amp.fact("fact.amp.steps", 7)]}
    same_page(metrics)


@pytest.mark.parametrize("alive", [1, 24])
def test_step_in_backward(alive):
    ref = SimpleNamespace(n_params=24, grad_bytes=24 << 20)
    metrics = {
        "peak_alive_gradients": alive,
        "reference_peak_alive_gradients": 24,
        "peak_gradient_bytes": alive << 20,
        "reference_peak_gradient_bytes": 24 << 20,
        "optimizer_step_calls": 48,
    }
    same_page(metrics | hookstep._figures(alive, alive << 20, ref, 48))


@pytest.mark.parametrize("trained", [1, 10_240])
def test_train_an_adapter(trained):
    metrics = {
        "model_parameters": 8_388_608,
        "trained_parameters": trained,
        "peak_gradient_bytes": 81_920,
        "full_gradient_bytes": 8_388_608 * 8,
        "optimizer_state_bytes": 163_840,
        "full_optimizer_state_bytes": 8_388_608 * 16,
    }
    same_page(metrics | {"charts": adapter._charts(metrics), "facts": []})


SPREADS = {
    "overlap": {"fp32": (2.3, 2.1, 2.6, 40), "low": (2.2, 2.0, 2.5, 40), "accum": (2.5, 2.4, 2.7, 40)},
    "fastest": {"fp32": (0.5, 0.49, 0.51, 40), "low": (0.9, 0.8, 1.0, 40), "all": (1.2, 1.1, 1.3, 40)},
    "alone": {"fp32": (2.3, 2.1, 2.6, 1)},
    "one run each": {"fp32": (2.3, 0.0, 0.0, 0), "checkpoint": (3.1, 0.0, 0.0, 0)},
}


@pytest.mark.parametrize("case", SPREADS)
@pytest.mark.parametrize("device", ["NVIDIA H200", "cpu"])
def test_measure_it(case, device):
    metrics = {
        "measured_on": device,
        "low_precision": "float16",
        "peak_measure": "live_tensor_bytes" if device == "cpu" else "max_memory_allocated",
    }
    timed = {}
    for i, (name, (ms, low, high, n)) in enumerate(SPREADS[case].items()):
        metrics[f"{name}_ms_per_step"] = ms
        if n:
            metrics |= {f"{name}_ms_low": low, f"{name}_ms_high": high, f"{name}_timed_steps": n}
        metrics[f"{name}_peak_bytes"] = 1_000_000 * (5 - i)
        timed[name] = (ms, low, high, n, 1_000_000 * (5 - i))
    same_page(metrics | {"charts": measure._charts(timed, metrics), "facts": []})


def test_time_a_step():
    run = {"answer": {"step_ms": 12.5, "same_batch_ms": 3.0, "bound": "device"}, "step_ms": 13.0}
    runs = [
        {**run, "scenario": "device", "kernel_ms": 3.2, "syncs": 10},
        {**run, "scenario": "loading", "kernel_ms": 1.0, "syncs": 10, "answer": {"step_ms": None}},
        {**run, "scenario": "blocking", "kernel_ms": 1.0, "syncs": 10, "answer": {"step_ms": 9.0}},
    ]
    metrics = timing._metrics(runs)
    assert [c["id"] for c in metrics["charts"]] == ["timing-device", "timing-blocking"]
    same_page(metrics)


def test_the_page_knows_no_kind():
    """figures.py draws what a verdict declares: no metric of a kind, no kind's text."""
    source = (ROOT / "app" / "submissions" / "figures.py").read_text(encoding="utf-8")
    strings = {
        n.value
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    kinds = {p.stem for p in (ROOT / "worker" / "checks").glob("*.py")} - {"__init__"}
    assert not {
        s
        for s in strings
        if (s.startswith("figure.") and s != "figure.")
        or s in kinds
        or s.endswith(("_bytes", "_ms_per_step"))
    }
