"""Lesson 5's memory meters (issue 31): what the verdict shows for step-in-backward and
train-an-adapter, graded for real in the sandbox — the learner's loop against the plain loop
(or full fine-tuning), in bytes the CPU and a GPU count the same (float64 tensors)."""

import pytest

from app import i18n
from app.submissions.figures import figures

pytestmark = pytest.mark.slow


def shown(verdict, lang="en"):
    """The verdict's charts as the page draws them: {id: [(label, value), …]}, and its facts."""
    i18n.set_lang(lang)
    try:
        drawn = figures(verdict)
    finally:
        i18n.set_lang("en")
    charts = {c.id: [(b.label, b.text) for b in c.bars] for c in drawn.charts}
    return charts, dict(drawn.facts), {c.id: c.summary for c in drawn.charts}


@pytest.fixture(scope="module")
def verdicts(graded):
    """Each exercise's solution, its starter (the plain loop / full fine-tuning) and mistakes."""
    names = {
        "step-in-backward": ["solution", "starter", "grads-not-released"],
        "train-an-adapter": ["solution", "starter", "base-not-frozen", "optimizer-over-all-parameters"],
    }
    keys = {
        (slug, name): ("starter", slug) if name == "starter" else ("bank", slug, name)
        for slug, each in names.items()
        for name in each
    }
    graded.ahead(keys.values())  # all at once, one per core
    return {shown: graded[key] for shown, key in keys.items()}


def test_step_in_backward_shows_one_gradient_alive_against_the_plain_loops_all(verdicts):
    """The loop runs once, on the wide model (issue 41): twelve 512×512 layers, 24 parameters,
    each weight's gradient 2 MiB; the plain loop holds all 24 MiB of them."""
    verdict = verdicts["step-in-backward", "solution"]
    assert verdict["status"] == "passed"
    charts, facts, summaries = shown(verdict)
    assert charts["gradients-alive"] == [("Yours", "1"), ("Plain loop", "24")]
    assert charts["gradients"] == [("Yours", "2.0 MiB"), ("Plain loop", "24.0 MiB")]
    assert facts["Optimizer step calls"] == "48"  # 24 parameters × 2 batches, each in its hook
    assert summaries["gradients-alive"] == (
        "At its busiest your loop left 1 gradient in .grad (2.0 MiB); the plain loop holds all 24 "
        "(24.0 MiB) until its optimizer step."
    )
    charts, _facts, summaries = shown(verdict, "pt-BR")
    assert charts["gradients"] == [("O seu", "2,0 MiB"), ("Loop comum", "24,0 MiB")]
    assert "deixou 1 gradiente no .grad (2,0 MiB)" in summaries["gradients-alive"]


@pytest.mark.parametrize("name", ["starter", "grads-not-released"])
def test_step_in_backward_mistakes_hold_every_gradient_as_the_plain_loop(verdicts, name):
    verdict = verdicts["step-in-backward", name]
    assert verdict["status"] == "failed"
    assert verdict["diagnosis"]["id"] == {"starter": "step-after-backward"}.get(name, name)
    charts, facts, summaries = shown(verdict)
    assert charts["gradients-alive"] == [("Yours", "24"), ("Plain loop", "24")]
    assert charts["gradients"] == [("Yours", "24.0 MiB"), ("Plain loop", "24.0 MiB")]
    assert facts["Optimizer step calls"] == {"starter": "2"}.get(name, "48")
    assert summaries["gradients-alive"].startswith("Your loop held 24 gradients at once (24.0 MiB)")


def test_train_an_adapter_shows_the_adapters_gradients_state_and_numbers(verdicts):
    verdict = verdicts["train-an-adapter", "solution"]
    assert verdict["status"] == "passed"
    charts, _facts, summaries = shown(verdict)
    assert charts["gradients"] == [("Yours", "80.0 KiB"), ("Full fine-tuning", "64.0 MiB")]
    assert charts["optimizer-state"] == [("Yours", "160.0 KiB"), ("Full fine-tuning", "128.0 MiB")]
    assert charts["trained"] == [("Yours", "10,240"), ("Full fine-tuning", "8,388,608")]
    assert summaries["trained"] == "Your optimizer trained 10,240 numbers; the model holds 8,388,608."
    charts, _facts, _summaries = shown(verdict, "pt-BR")
    assert charts["optimizer-state"] == [("O seu", "160,0 KiB"), ("Fine-tuning completo", "128,0 MiB")]


@pytest.mark.parametrize(
    ("name", "gradients", "state", "trained"),
    [
        ("starter", "64.0 MiB", "128.0 MiB", "8,388,608"),  # full fine-tuning, no adapter
        ("base-not-frozen", "64.1 MiB", "160.0 KiB", "10,240"),  # the model's gradients beside the adapter's
        ("optimizer-over-all-parameters", "64.1 MiB", "128.2 MiB", "8,398,848"),  # 8,388,608 + 10,240
    ],
)
def test_train_an_adapter_mistakes_show_what_they_spend(verdicts, name, gradients, state, trained):
    verdict = verdicts["train-an-adapter", name]
    assert verdict["status"] == "failed"
    charts, _facts, _summaries = shown(verdict)
    assert charts["gradients"] == [("Yours", gradients), ("Full fine-tuning", "64.0 MiB")]
    assert charts["optimizer-state"] == [("Yours", state), ("Full fine-tuning", "128.0 MiB")]
    assert charts["trained"] == [("Yours", trained), ("Full fine-tuning", "8,388,608")]


def test_the_starter_is_not_told_it_has_an_adapter(verdicts):
    """The starter trains the whole model and has no adapter: its diagnosis says so, where it
    used to say "full fine-tuning, with the adapter on top"."""
    starter = verdicts["train-an-adapter", "starter"]["diagnosis"]
    assert starter["id"] == "optimizer-over-all-parameters"
    assert "with no adapter beside it" in starter["explanation"]
    assert "on top" not in starter["explanation"]
    chained = verdicts["train-an-adapter", "optimizer-over-all-parameters"]["diagnosis"]
    assert "with the adapter trained on top of it" in chained["explanation"]


def _kernel_line(verdict):
    """The check line that rests on the memory the operating system counted (issue 41)."""
    return next(c for c in verdict["checks"] if c["name"] == "Gradients alive, as the system counted them")


def test_step_in_backward_passes_on_the_memory_the_system_counted(verdicts):
    """The pass rests on the kernel's count of the process (the lists the loop's process reports
    only name the mistake): in the hook, Adam's state and one gradient; the plain loop and a loop
    that never releases hold every gradient of the wide model on top (24 MiB of parameters). The
    parameters the supervisor read are right in all three: a memory figure goes by them."""
    line = _kernel_line(verdicts["step-in-backward", "solution"])
    assert line["status"] == "passed", line
    assert "12 layers of 512×512 (24.0 MiB of parameters)" in line["message"]
    for name in ("starter", "grads-not-released"):
        line = _kernel_line(verdicts["step-in-backward", name])
        assert line["status"] == "failed", line
    assert "more than one gradient was alive at once" in line["message"]


def test_the_adapters_no_gradient_line_rests_on_the_memory_the_system_counted(verdicts):
    """Issue 41: "no gradient for the model" is not the program's word: the loop runs once, on a
    model whose two weights (1,024 → 4,096 → 1,024) take 32 MiB of gradient each; a frozen
    model's memory rises by a fraction of one; one never frozen, by both (golden/train-an-adapter/
    fail--*: a report with no gradient fails all the same)."""
    line = verdicts["train-an-adapter", "solution"]["checks"][1]
    assert line["status"] == "passed", line
    assert "two weights (1,024 → 4,096 → 1,024) take 32.0 MiB of gradient each" in line["message"], line
    assert "your program's word" not in line["message"]
    honest = verdicts["train-an-adapter", "base-not-frozen"]["checks"][1]
    assert honest["status"] == "failed", honest
