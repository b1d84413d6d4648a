"""Grade one submission: validate, run it in the sandbox, judge the trace, build the record.

A ``Grader`` is built once per process (``Grader.running(settings)``: its sandbox setup, device
and warm pool) and handed to whoever grades: the worker, `treino check`, `treino lessons check`,
the benchmarks and the tests. ``Grader.grade`` returns the verdict *record* of
contracts/verdict.py (message keys and values); ``verdict.render`` gives it texts in a
language, ``format_verdict`` prints a rendered verdict for a terminal, and
``Grader.check_exercise`` proves an exercise's own files (its solution passes, each
``mistakes/<id>.py`` fails and is diagnosed as ``<id>``).
"""

import ast
import contextlib
import logging
import os
import sysconfig
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from contracts.exercise import Exercise
from contracts.languages import language
from contracts.limits import Limits
from contracts.messages import Phrase, number, text
from contracts.verdict import Record, VerdictStatus, check_record, record, render, seal
from worker import forkserver, sandbox
from worker.checks import (
    Check,
    Diagnosis,
    Interfered,
    Kind,
    OverBudget,
    Prepare,
    Summarize,
    budget,
    kind_module,
)

log = logging.getLogger("treino.grading")
# judging one trace (worker.checks.budget): the checks are near-linear in lists the trace's
# schema bounds, so an honest run takes a fraction of a second; past this, the learner is told
CHECK_SECONDS = 15
# PyTorch features the harness refuses by name (worker/harness/instrument.py's Unavailable)
UNAVAILABLE = ("compile", "transforms", "profiler", "threads", "processes")


def _prepare(exercise: Exercise, device: str) -> None:
    """Build the exercise's reference, if its kind has one (cached by the kind)."""
    prepare_kind: Prepare | None = getattr(kind_module(exercise.check_kind), "prepare", None)
    if prepare_kind is not None:
        prepare_kind(exercise.check_params, device)


def _record(
    exercise: Exercise,
    status: VerdictStatus,
    checks: list[Check] | tuple[()] = (),
    diagnosis: Diagnosis | None = None,
    metrics: dict[str, Any] | None = None,
    output: str = "",
) -> Record:
    return record(
        exercise.id,
        status,
        [check_record(c.name, c.passed, c.message, c.values) for c in checks],
        None if diagnosis is None else (diagnosis.id, diagnosis.values),
        metrics,
        output,
    )


def _library_prefixes() -> tuple[str, ...]:
    """Where this interpreter's libraries live, longest first: a warning PyTorch prints names its
    file under one of them, a path of the grader's machine that means nothing to the learner."""
    paths = sysconfig.get_paths()
    found = {paths[key] for key in ("purelib", "platlib", "stdlib", "platstdlib") if paths.get(key)}
    return tuple(sorted((p.rstrip("/") + "/" for p in found), key=len, reverse=True))


def _tidy(output: str) -> str:
    """The output with the grader's library folders cut from file names
    (``/srv/.venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py:431`` reads
    ``torch/utils/data/dataloader.py:431``): the same lines a learner's own machine prints, less
    where the grader keeps its packages."""
    for prefix in _library_prefixes():
        output = output.replace(prefix, "")
    return output


def _cap(output: str, limit_kb: int) -> str:
    limit = limit_kb * 1024
    return output if len(output) <= limit else output[:limit] + "\n[…]"


def _interfered(key: str, values: dict[str, Any]) -> Check:
    """``error.interfered``, quoting what was observed (``interfered.<key>``)."""
    return Check("run", False, "error.interfered_observed", {"observed": Phrase(f"interfered.{key}", values)})


def _trouble(exercise: Exercise, metrics: dict[str, Any], output: str) -> Record:
    """A fault of ours (logged by the caller with its traceback): never the learner's."""
    check = Check("run", False, "error.grader_trouble", {})
    trouble = Diagnosis("grader-trouble", {})
    return _record(exercise, "error", [check], trouble, metrics=metrics, output=output)


def validate(exercise: Exercise, code: bytes) -> Check | None:
    """Why ``code`` is refused before running, or None."""
    limit = exercise.limits.code_kb
    if len(code) > limit * 1024:
        return Check(
            "input", False, "rejected.too_large", {"size": round(len(code) / 1024, 1), "limit": limit}
        )
    if b"\x00" in code:
        return Check("input", False, "rejected.not_text", {})
    try:
        code.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Check("input", False, "rejected.not_utf8", {"offset": exc.start})
    return None


def syntax_error(code: bytes) -> dict[str, Any] | None:
    """The syntax error of ``code`` as the harness would report it, found without running it."""
    try:
        compile(code.decode("utf-8"), "submission.py", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return {
            "phase": "syntax",
            "type": type(exc).__name__,
            "message": exc.msg,
            "line": exc.lineno,
            "code": (exc.text or "").strip()[:200],
        }
    except (RecursionError, MemoryError):
        return {
            "phase": "syntax",
            "type": "SyntaxError",
            "message": "too deeply nested",
            "line": 0,
            "code": "",
        }
    return None


def _error_check(error: dict[str, Any], entry: str) -> Check:
    phase, kind = error.get("phase"), error.get("type", "")
    if phase == "syntax":
        return Check(
            "run",
            False,
            "error.syntax",
            {
                "line": error.get("line") or 0,
                "message": error.get("message", ""),
                "code": error.get("code", ""),
            },
        )
    if kind == "MissingFunction":
        return Check("run", False, "error.missing_function", {"entry": entry})
    if kind == "WrongSignature":
        expected = error.get("expected", [])
        return Check(
            "run",
            False,
            "error.signature",
            {"entry": entry, "count": len(expected), "expected": ", ".join(expected)},
        )
    if kind == "Unavailable" and error.get("limit") in UNAVAILABLE:
        return Check("run", False, f"error.unavailable_{error['limit']}", {})
    if kind == "ModuleNotFoundError" and error.get("module"):
        return Check("run", False, "error.import", {"module": error["module"]})
    if phase == "harness":
        return Check("run", False, "error.harness", {"message": error.get("message", "")})
    frames = error.get("traceback") or []
    values = {"type": kind, "message": error.get("message", "")}
    if frames:
        last = frames[-1]
        values |= {"line": last["line"], "function": last["function"], "code": last["code"]}
        return Check("run", False, "error.exception_at", values)
    return Check("run", False, "error.exception", values)


class Choices(Protocol):
    """What a grader is built from: the settings' sandbox, start, device and pool size
    (``app.config.Settings`` has them; the grading core imports nothing else of the web's)."""

    @property
    def sandbox(self) -> str: ...
    @property
    def sandbox_start(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def pool_size(self) -> int: ...


class Runner(Protocol):
    """What hands a job to a sandbox: a ``Pool`` of single-use sandboxes, or a fork server. Each
    runs the job through one ``sandbox.Job`` (a warm or cold ``Sandbox``, a ``ForkedJob``),
    whose ``Result`` this returns: how the job ended and its trace, the same from either."""

    def run(
        self,
        kind: str,
        spec: dict[str, Any],
        code: bytes,
        limits: Limits,
        cancel: sandbox.Cancel | None = None,
    ) -> sandbox.Result: ...

    def warm(self) -> int: ...

    def close(self) -> None: ...


@dataclass
class Grader:
    """Grades submissions with one sandbox setup, device and runner; built once per process."""

    setup: sandbox.Setup
    pool: Runner

    @classmethod
    @contextlib.contextmanager
    def running(
        cls, settings: Choices, pool_size: int | None = None, *, setup: sandbox.Setup | None = None
    ) -> Iterator["Grader"]:
        """A grader of ``settings``' sandbox and device (or of ``setup``) for the duration: its
        jobs forked from a template (``TREINO_SANDBOX_START=fork``, where that works), or from a
        warm pool of ``pool_size`` single-use sandboxes (default ``TREINO_POOL_SIZE``; 0: a cold
        sandbox per job, never forked; ``worker.forkserver.runner``). Raises
        ``sandbox.SandboxUnavailable`` when a mandatory sandbox or device is missing."""
        setup = setup or sandbox.setup(settings.sandbox, settings.device)
        size = settings.pool_size if pool_size is None else pool_size
        pool = forkserver.runner(settings.sandbox_start, setup, size)
        with cls(setup, pool) as grader:
            yield grader

    def close(self) -> None:
        """Stop the pool's sandboxes and wait until every used one is gone."""
        self.pool.close()
        sandbox.reap_all()

    def __enter__(self) -> "Grader":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def device(self) -> str:
        return self.setup.device

    def grade(
        self, exercise: Exercise, code: bytes, *, run_only: bool = False, cancel: sandbox.Cancel | None = None
    ) -> Record:
        """The verdict record of ``code`` for ``exercise``. ``run_only``: run it and measure,
        judge nothing (status "passed" then means "it ran"); ``cancel`` ends the run at once.
        Always strict JSON, and at most ``verdict.MAX_BYTES``."""
        return seal(self._grade(exercise, code, run_only, cancel), exercise.limits.output_kb)

    def _grade(
        self, exercise: Exercise, code: bytes, run_only: bool, cancel: sandbox.Cancel | None
    ) -> Record:
        refused = validate(exercise, code)
        if refused is not None:
            return _record(exercise, "rejected", [refused])
        syntax = syntax_error(code)  # the commonest mistake gets its answer without a sandbox
        if syntax is not None:
            return _record(exercise, "error", [_error_check(syntax, exercise.entry)])
        limits = exercise.limits
        device = self.setup.device
        checks_module = kind_module(exercise.check_kind)
        params = exercise.check_params
        inputs = getattr(checks_module, "job_inputs", None)  # what the sandbox can't read itself
        if inputs is not None:
            params = {**params, **inputs(params)}
        spec = {"entry": exercise.entry, "params": params, "device": device}  # protocol.Spec's
        result = self.pool.run(exercise.check_kind, spec, code, limits, cancel)
        # "process" means the learner's code ran without isolation: pages say so plainly
        metrics: dict[str, Any] = {
            "device": device,
            "sandbox_ms": result.wall_ms,
            "isolation": self.setup.isolation,
        }
        output = _cap(result.output, limits.output_kb)
        if result.status == "timeout":
            check = Check("run", False, "error.timeout", {"seconds": limits.wall_seconds})
            return _record(exercise, "timeout", [check], metrics=metrics, output=output)
        if result.status == "crashed":
            if result.reason == sandbox.INVALID_TRACE:
                check = _interfered("trace", {})
            elif result.reason == sandbox.INCOMPLETE_TRACE:  # the harness never said it was done
                check = Check("run", False, "error.harness", {"message": "its trace was left unfinished"})
            else:
                check = Check("run", False, "error.crashed", {"reason": result.reason})
            return _record(exercise, "error", [check], metrics=metrics, output=output)
        try:
            _prepare(exercise, device)  # the reference (cached) is ours to build, not the run's cost
            with budget(CHECK_SECONDS):
                return _judge(
                    exercise, result.trace or {}, result.output, checks_module, metrics, device, run_only
                )
        except Interfered as exc:  # what the child reported is not what the harness observed
            log.info("%s: interference: %s", exercise.id, exc)
            check = _interfered(exc.key, exc.values)
            return _record(exercise, "error", [check], metrics=metrics, output=output)
        except OverBudget:  # bounded lists, near-linear checks: a run that still costs this much
            log.warning("%s: judging ran past %s s", exercise.id, CHECK_SECONDS)
            check = Check("run", False, "error.check_budget", {"seconds": CHECK_SECONDS})
            return _record(exercise, "error", [check], metrics=metrics, output=output)
        except Exception:  # ours: the supervisor alone wrote this trace, and it kept the schema
            log.exception("%s: the checks failed on a trace", exercise.id)
            return _trouble(exercise, metrics, output)

    def prepare(self, exercises: list[Exercise]) -> None:
        """Make a worker's first verdict as quick as the next: compute every exercise's reference
        (and pay torch's lazy first-use costs, seconds) at start-up, not in a learner's wait."""
        import torch

        # the worker's own tensors are tiny: a second thread only spins, against the sandbox too
        torch.set_num_threads(1)
        for exercise in exercises:
            _prepare(exercise, self.setup.device)

    def check_exercise(self, exercise: Exercise) -> list[str]:
        """Problems with an exercise's own files; an empty list means it is sound."""
        folder = Path(exercise.path)
        mistakes = sorted((folder / "mistakes").glob("*.py"))
        files = [folder / "solution.py", *mistakes]
        # one sandbox per file, as for learners; several at once to use the cores (one job per GPU)
        workers = 1 if self.setup.device == "cuda" else min(len(files), os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=workers) as threads:
            records = list(threads.map(lambda path: self.grade(exercise, path.read_bytes()), files))
        problems = []
        solution = records[0]
        if solution["status"] != "passed":
            verdict = render(solution, "en")
            reason = "; ".join(c["message"] for c in verdict["checks"] if c["status"] == "failed")
            problems.append(f"{exercise.id}: solution.py does not pass ({solution['status']}: {reason})")
        if not mistakes:
            problems.append(f"{exercise.id}: no mistakes/<diagnosis-id>.py files")
        for path, rec in zip(mistakes, records[1:], strict=True):
            found = rec["diagnosis"]["id"] if rec["diagnosis"] else None
            if rec["status"] == "passed":
                problems.append(f"{exercise.id}: mistakes/{path.name} passes")
            elif found != path.stem:
                problems.append(
                    f"{exercise.id}: mistakes/{path.name} is diagnosed as {found} ({rec['status']})"
                )
        return problems


def _judge(
    exercise: Exercise,
    trace: dict[str, Any],
    process_output: str,
    checks_module: Kind,
    metrics: dict[str, Any],
    device: str,
    run_only: bool,
) -> Record:
    limits = exercise.limits
    # the learner's prints, then anything written to the process's own stdout/stderr
    output = _cap(_tidy(trace.get("output", "") + process_output), limits.output_kb)
    metrics |= {f"harness_{k}": v for k, v in (trace.get("timings") or {}).items()}
    started = time.perf_counter()
    if trace.get("outcome") != "ok":
        error = trace.get("error") or {}
        if error.get("phase") == "harness":  # the harness's own code raised: ours to fix
            log.error(
                "%s: the harness failed: %s: %s\n%s",
                exercise.id,
                error.get("type", ""),
                error.get("message", ""),
                error.get("detail", ""),
            )
            metrics["check_ms"] = round((time.perf_counter() - started) * 1000)
            return _trouble(exercise, metrics, output)
        diagnosis = checks_module.diagnose_error(exercise.check_params, trace.get("data"), error)
        metrics["check_ms"] = round((time.perf_counter() - started) * 1000)
        return _record(exercise, "error", [_error_check(error, exercise.entry)], diagnosis, metrics, output)
    if run_only:  # what the loop did (steps, losses…) where the kind can tell; no pass/fail
        summarize: Summarize | None = getattr(checks_module, "summarize", None)
        measured = summarize(exercise.check_params, trace["data"]) if summarize else {}
        metrics = {**measured, **metrics, "check_ms": round((time.perf_counter() - started) * 1000)}
        return _record(exercise, "passed", metrics=metrics, output=output)
    evaluation = checks_module.evaluate(exercise.check_params, trace["data"], device)
    metrics = {**evaluation.metrics, **metrics, "check_ms": round((time.perf_counter() - started) * 1000)}
    status: VerdictStatus = "passed" if evaluation.passed else "failed"
    return _record(exercise, status, evaluation.checks, evaluation.diagnosis, metrics, output)


MARKS = {"passed": "✓", "failed": "✗"}


def format_verdict(stored: Mapping[str, Any], lang: str = "en") -> str:
    """A verdict record (or a rendered verdict) as readable terminal text in ``lang``."""
    lang = language(lang)
    verdict = render(stored, lang)
    status = verdict["status"]
    lines = [f"{text(f'verdict.status.{status}', lang)} — {verdict['exercise']}"]
    diagnosis = verdict.get("diagnosis")
    if diagnosis:
        lines += [
            "",
            f"{text('verdict.diagnosis', lang)}: {diagnosis['title']} ({diagnosis['id']})",
            f"  {diagnosis['explanation']}",
        ]
    if verdict["checks"]:
        lines += [""] + [f"  {MARKS[c['status']]} {c['name']}: {c['message']}" for c in verdict["checks"]]
    metrics = verdict.get("metrics") or {}
    shown = [
        (key, metrics[key])
        for key in (
            "optimizer_steps",
            "update_ratio",
            "peak_activation_bytes",
            "reference_peak_activation_bytes",
            "device",
            "sandbox_ms",
            "check_ms",
        )
        if key in metrics
    ]
    if shown:
        lines += ["", text("verdict.metrics", lang) + ":"]
        lines += [
            f"  {text(f'metric.{key}', lang)}: {number(value, lang) if value is not None else '—'}"
            for key, value in shown
        ]
    if verdict.get("output"):
        lines += ["", text("verdict.output", lang) + ":"]
        lines += ["  " + line for line in verdict["output"].rstrip("\n").splitlines()]
    return "\n".join(lines)
