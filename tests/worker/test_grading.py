import pytest

from worker.grading import format_verdict

VERDICT_KEYS = {"version", "exercise", "status", "diagnosis", "checks", "metrics", "output"}


def only_message(verdict) -> str:
    assert set(verdict) == VERDICT_KEYS
    assert verdict["version"] == 1
    (check,) = verdict["checks"]
    assert {"name", "status", "message"} <= set(check) <= {"name", "status", "message", "line"}
    assert check["status"] == "failed"
    return check["message"]


def test_rejects_too_large(exercise, grade):
    verdict = grade(exercise("accumulate", code_kb=1), b"# " + b"x" * 2000 + b"\n")
    assert verdict["status"] == "rejected"
    assert "limit is 1 KiB" in only_message(verdict)


def test_rejects_nul_bytes(exercise, grade):
    verdict = grade(exercise("accumulate"), b"def train(*a):\x00 pass\n", "pt-BR")
    assert verdict["status"] == "rejected"
    assert "NUL" in only_message(verdict)


def test_rejects_non_utf8(exercise, grade):
    verdict = grade(exercise("accumulate"), "# ação\n".encode("latin-1"))
    assert verdict["status"] == "rejected"
    assert "UTF-8" in only_message(verdict)


def test_syntax_error_is_reported_with_its_line(exercise, grade):
    verdict = grade(
        exercise("accumulate"),
        b"def train(model, loader, loss_fn, optimizer, k):\n    for x in loader\n        pass\n",
    )
    assert verdict["status"] == "error"
    message = only_message(verdict)
    assert "line 2" in message and "for x in loader" in message
    assert verdict["checks"][0]["line"] == 2  # the line the editor marks


@pytest.mark.slow
def test_missing_function(graded):
    verdict = graded["case", "missing-function"]
    assert verdict["status"] == "error"
    assert "`train`" in only_message(verdict)


@pytest.mark.slow
def test_wrong_signature(graded):
    verdict = graded["case", "wrong-signature"]
    assert verdict["status"] == "error"
    assert "model, loader, loss_fn, optimizer, accum_steps" in only_message(verdict)


@pytest.mark.slow
def test_missing_module(graded):
    verdict = graded["case", "missing-module"]
    assert verdict["status"] == "error"
    assert "`treino_no_such_module`" in only_message(verdict)


@pytest.mark.slow
def test_exception_shows_the_learners_line_and_nothing_else(graded):
    verdict = graded["case", "probe"]
    assert verdict["status"] == "error"
    message = only_message(verdict)
    assert "ValueError: boom" in message
    assert 'line 10, in train: raise ValueError("boom")' in message
    assert "runtime.py" not in message  # harness frames are not the learner's
    output = verdict["output"]
    assert "'HOME'" in output and "TREINO_" not in output  # a scrubbed environment
    assert "submission.py" in output
    assert "solution.py" not in output and "mistakes" not in output
    assert len(output) <= 4 * 1024 + 10  # capped (the learner printed ~300 KB)


@pytest.mark.slow
def test_endless_loop_times_out(graded):
    verdict = graded["case", "endless-loop"]
    assert verdict["status"] == "timeout"
    assert "8 seconds" in only_message(verdict)


@pytest.mark.slow
def test_exit_without_trace_is_an_error(graded):
    verdict = graded["case", "exit-without-trace"]
    assert verdict["status"] == "error"
    assert "no-trace" in only_message(verdict)


def test_format_verdict_in_portuguese():
    verdict = {
        "version": 1,
        "exercise": "gradient-accumulation/accumulate",
        "status": "failed",
        "diagnosis": {"id": "loss-not-scaled", "title": "A perda…", "explanation": "4,00×"},
        "checks": [{"name": "Passos", "status": "passed", "message": "3 passos"}],
        "metrics": {"optimizer_steps": 3, "update_ratio": 4.0, "peak_activation_bytes": 1808},
        "output": "olá\n",
    }
    text = format_verdict(verdict, "pt-BR")
    assert text.startswith("Ainda não — gradient-accumulation/accumulate")
    assert "Diagnóstico: A perda… (loss-not-scaled)" in text
    assert "✓ Passos: 3 passos" in text
    assert "4,00" in text and "1.808" in text and "olá" in text


def test_live_tensor_meter_charges_new_storage_not_aliases():
    """A view, detach or in-place op allocates nothing, whether its storage was made before
    the meter (the batch) or under it; a new tensor costs its bytes."""
    import torch

    from worker.harness import memory

    x = torch.zeros(64, 16, dtype=torch.float64)  # 8,192 bytes, made before the meter
    with memory.LiveTensorMeter([]) as meter:
        aliases = [x.detach().requires_grad_(True), x.view(64, 16), x[:, :8], x.t()]
        x.add_(1)
    assert meter.peak == 0, aliases
    with memory.LiveTensorMeter([]) as meter:
        y = x * 2
        z = y.view(-1).detach()
    assert meter.peak == 8192, (y, z)
