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


class OneTrace:
    """A runner that hands back the same well-formed trace for every job (no sandbox)."""

    def __init__(self, kind: str) -> None:
        self.trace = {"version": 1, "kind": kind, "outcome": "ok", "error": None, "data": {"runs": []}}

    def run(self, kind, job, code, limits, cancel=None):
        from worker import sandbox

        return sandbox.Result("ok", dict(self.trace), 5, "", 0)

    def warm(self) -> int:
        return 0

    def close(self) -> None:
        pass


def _judged_by(monkeypatch, evaluate):
    from worker import grading, sandbox
    from worker.checks import kind_module

    monkeypatch.setattr(kind_module("phases"), "evaluate", evaluate)
    return grading.Grader(sandbox.Setup("process", "cpu"), OneTrace("phases"))


def test_judging_past_its_budget_is_the_learners_error_and_the_next_is_judged_at_once(exercise, monkeypatch):
    """Issue 27: find-the-bottleneck's checks held a worker for hours on a flooded trace. Judging
    now runs under a budget: an overrun is this learner's error, saying so, and the next learner's
    run is judged as quickly as ever."""
    import time

    from contracts.verdict import render
    from worker import grading
    from worker.checks import Check, Evaluation

    calls = []

    def evaluate(params, data, device):
        calls.append(1)
        while len(calls) == 1:  # the first run: checks that never end
            pass
        return Evaluation([Check("labels", True, "check.labels.passed", {"phases": "data"})], None, {})

    monkeypatch.setattr(grading, "CHECK_SECONDS", 0.3)
    grader = _judged_by(monkeypatch, evaluate)
    ex = exercise("find-the-bottleneck")
    started = time.monotonic()
    first = render(grader.grade(ex, b"def find_bottleneck(*a):\n    return 'data'\n"), "en")
    assert first["status"] == "error", first
    assert "longer than the grader allows (0.30 seconds)" in only_message(first)
    assert time.monotonic() - started < 5
    started = time.monotonic()
    second = render(grader.grade(ex, b"def find_bottleneck(*a):\n    return 'data'\n"), "pt-BR")
    assert second["status"] == "passed", second
    assert time.monotonic() - started < 1


def test_an_exception_of_the_checks_is_ours_not_the_learners(exercise, monkeypatch, caplog):
    """It was answered as the learner's interference; it is the grader's trouble, logged with
    its traceback, and the learner is told so in both languages."""
    from contracts.verdict import render

    def evaluate(params, data, device):
        raise KeyError("a bug of ours")

    grader = _judged_by(monkeypatch, evaluate)
    record = grader.grade(exercise("find-the-bottleneck"), b"def find_bottleneck(*a):\n    return 'data'\n")
    verdict = render(record, "en")
    assert verdict["status"] == "error"
    assert verdict["diagnosis"]["id"] == "grader-trouble"
    assert "a fault of ours, not of your code" in only_message(verdict)
    assert "o erro é nosso, não do seu código" in render(record, "pt-BR")["checks"][0]["message"]
    logged = [r for r in caplog.records if r.name == "treino.grading" and r.exc_info]
    assert logged and "a bug of ours" in str(logged[0].exc_info[1])


def test_a_feature_the_grader_refuses_is_named_in_the_learners_language_not_as_their_exception(exercise):
    """torch.compile and torch.func's transforms raise the harness's Unavailable (its limit named);
    the verdict says which feature and why in the learner's language, not 'Your code raised
    Unavailable: …' in English. A learner's own class of that name with another limit is their
    exception like any other."""
    from contracts.verdict import render
    from worker import grading

    def verdict(limit: str, lang: str) -> str:
        error = {"phase": "run", "type": "Unavailable", "message": "English text", "limit": limit}
        record = grading._record(exercise("accumulate"), "error", [grading._error_check(error, "train")])
        return only_message(render(record, lang))

    assert "torch.compile" in verdict("compile", "en") and "compile na sua máquina" in verdict(
        "compile", "pt-BR"
    )
    assert "loss.backward()" in verdict("transforms", "en") and "torch.func" in verdict("transforms", "pt-BR")
    assert "Unavailable" in verdict("anything-else", "en")


def test_the_output_names_library_files_as_a_learners_machine_would():
    """A warning PyTorch prints names its file under the grader's site-packages: shown as
    ``torch/...``, the grader's own folders left out (issue 29, point 6)."""
    import sysconfig

    from worker.grading import _tidy

    site = sysconfig.get_paths()["purelib"]
    warning = "torch/utils/data/dataloader.py:431: UserWarning: This DataLoader will create 4 workers"
    assert _tidy(f"{site}/{warning}\nmy own print\n") == f"{warning}\nmy own print\n"


def _interference(monkeypatch, key, values=None, detail=""):
    from worker.checks import Interfered

    def evaluate(params, data, device):
        raise Interfered(key, values, detail)

    return _judged_by(monkeypatch, evaluate)


def test_interference_says_what_was_observed_and_accuses_no_one(exercise, monkeypatch):
    """Issue 27: every 'interfered' text read as a charge ('This happens when a program changes
    or replaces the objects…') and said nothing of what the grader saw. It now quotes the
    observation, in the learner's language, and says the fault may be ours."""
    from contracts.messages import Phrase
    from contracts.verdict import render

    grader = _interference(
        monkeypatch, "count", {"reported": 2, "seen": 3, "unit": Phrase("interfered.unit.steps")}
    )
    record = grader.grade(exercise("find-the-bottleneck"), b"def find_bottleneck(*a):\n    return 'data'\n")
    en, pt = (only_message(render(record, lang)) for lang in ("en", "pt-BR"))
    assert record["status"] == "error" and record["diagnosis"] is None
    assert "your run reported 2 where the grader counted 3 (optimizer steps)" in en
    assert "a sua execução informou 2, e o avaliador contou 3 (passos do otimizador)" in pt
    assert "the fault may be ours" in en and "a falha pode ser nossa" in pt
    for message in (en, pt):
        assert "use them as they are given" not in message and "use tudo do jeito" not in message


def test_every_observation_an_interference_can_quote_has_both_texts():
    """The keys the checks raise (Interfered("<key>"), agree's units) and the supervisor's keys
    (observed["interfered"], issue 27: a key and its values, no prose to match) have
    interfered.<key> texts in both languages; a key the supervisor does not send reads 'other'."""
    import re
    from pathlib import Path

    from contracts.messages import catalogue
    from worker import checks

    source = "\n".join(p.read_text() for p in (Path(checks.__file__).parent).glob("*.py"))
    keys = set(re.findall(r'Interfered\(\s*"([a-z_]+)"', source))
    keys |= set(checks.SUPERVISOR_KEYS) | {"parameters", "memory", "count", "counts", "trace", "other"}
    units = set(re.findall(r'agree\([^\n]*"([a-z]+)"\)', source)) - {"parameters", "memory"}
    texts = catalogue()
    for key in keys:
        assert set(texts.get(f"interfered.{key}", {})) == {"en", "pt-BR"}, key
    for unit in units:
        assert set(texts.get(f"interfered.unit.{unit}", {})) == {"en", "pt-BR"}, unit

    def raised(notes):
        with pytest.raises(checks.Interfered) as caught:
            checks.observed({"observed": {"interfered": notes}})
        return caught.value.key, caught.value.values

    blind = [{"key": "meter_blind", "values": {"meter": 0}}, {"key": "protocol", "values": {}}]
    assert raised(blind) == ("meter_blind", {"meter": 0})  # the first note, its values as data
    assert raised([{"key": "something-new", "values": {}}]) == ("other", {})
    assert raised([{"key": "protocol", "values": {"bytes": 9, "x": [1], "y": 1.5}}]) == (
        "protocol",
        {"bytes": 9},
    )
    assert raised(["a note in prose"]) == ("other", {})


def test_a_failure_of_the_harness_is_ours_and_logged_with_its_traceback(exercise, monkeypatch, caplog):
    """The harness's own code raising in the sandbox (phase 'harness') was told as 'The grader
    itself failed (KeyError: …)', its traceback dropped: it is grader-trouble now, in both
    languages, and the log keeps the traceback the supervisor sent."""
    from contracts.verdict import render
    from worker import grading, sandbox

    runner = OneTrace("phases")
    runner.trace = {
        "version": 1,
        "kind": "phases",
        "outcome": "error",
        "error": {
            "phase": "harness",
            "type": "KeyError",
            "message": "'params'",
            "traceback": [],
            "detail": 'Traceback (most recent call last):\n  File "/harness/phases.py", line 9\n'
            "KeyError: 'params'",
        },
        "data": None,
    }
    grader = grading.Grader(sandbox.Setup("process", "cpu"), runner)
    with caplog.at_level("ERROR", logger="treino.grading"):
        record = grader.grade(
            exercise("find-the-bottleneck"), b"def find_bottleneck(*a):\n    return 'data'\n"
        )
    assert record["status"] == "error"
    assert record["diagnosis"]["id"] == "grader-trouble"
    assert "a fault of ours, not of your code" in only_message(render(record, "en"))
    assert "o erro é nosso" in only_message(render(record, "pt-BR"))
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "treino.grading")
    assert 'File "/harness/phases.py", line 9' in logged and "KeyError" in logged


def test_a_one_thread_grader_names_the_profiler_and_threads_in_both_languages(exercise):
    """torch.profiler in accumulate read 'Your code raised RuntimeError: Operation not permitted':
    the harness's Unavailable now names the limit, and the verdict says it in the learner's
    language."""
    from contracts.verdict import render
    from worker import grading

    def verdict(limit: str, lang: str) -> str:
        error = {"phase": "run", "type": "Unavailable", "message": "English text", "limit": limit}
        record = grading._record(exercise("accumulate"), "error", [grading._error_check(error, "train")])
        return only_message(render(record, lang))

    assert "the profiler starts a thread" in verdict("profiler", "en")
    assert "o profiler inicia uma thread" in verdict("profiler", "pt-BR")
    assert "on a single thread and in a single process" in verdict("threads", "en")
    assert "não dá para iniciar threads nem processos" in verdict("threads", "pt-BR")


@pytest.mark.slow
def test_honest_loops_the_grader_cannot_run_hear_the_limit_not_an_exception(graded):
    """Issue 27, point 4, graded in the sandbox: torch.profiler and a thread of the loop's own in
    a one-thread kind get the limit named (not 'Your code raised RuntimeError: Operation not
    permitted' / "can't start new thread"); an optimizer of the loop's own is told that the
    parameters moved without the handed optimizer's step (not 'the parameters did not move')."""
    profiler = graded["golden", "fit-the-budget", "fail--profiler-around-loop"]
    assert "the profiler starts a thread" in only_message(profiler)
    thread = graded["golden", "fit-the-budget", "fail--thread-logger"]
    assert "on a single thread and in a single process" in only_message(thread)
    forked = graded["golden", "accumulate", "fail--backward-in-a-forked-process"]
    assert "starting a process is refused here (threads may run)" in only_message(forked)
    own = graded["golden", "accumulate", "fail--own-optimizer"]
    trajectory = next(c for c in own["checks"] if c["name"] == "Parameters after each step")
    assert "never stepped, yet the parameters moved" in trajectory["message"]
