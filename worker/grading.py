"""Grade one submission: validate, run it in the sandbox, judge the trace, build the verdict.

The verdict is the versioned object of docs/architecture.md ("Contracts"); ``format_verdict``
prints it for a terminal and ``check_exercise`` proves an exercise's own files (its
solution passes, each ``mistakes/<id>.py`` fails and is diagnosed as ``<id>``).
"""

import ast
import json
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from worker import pool, sandbox
from worker.checks import Check, Diagnosis, Evaluation, kind_module
from app.submissions.messages import language, number, render, text

log = logging.getLogger("treino.grading")

VERDICT_VERSION = 1
STATUSES = ("passed", "failed", "error", "timeout", "rejected")


def _limits(exercise) -> sandbox.Limits:
    lim = exercise.limits
    return sandbox.Limits(wall_seconds=lim.wall_seconds, cpu_seconds=lim.cpu_seconds,
                          memory_mb=lim.memory_mb, output_kb=lim.output_kb)


def _check(check: Check, lang: str) -> dict:
    out = {"name": text(f"check.{check.name}.name", lang),
           "status": "passed" if check.passed else "failed",
           "message": render(check.message, lang, check.values)}
    if check.message.startswith("error.") and check.values.get("line"):
        out["line"] = check.values["line"]  # the learner's line the error points at (the editor marks it)
    return out


def _diagnosis(diagnosis: Diagnosis | None, lang: str) -> dict | None:
    if diagnosis is None:
        return None
    return {"id": diagnosis.id,
            "title": text(f"diagnosis.{diagnosis.id}.title", lang),
            "explanation": render(f"diagnosis.{diagnosis.id}.explanation", lang, diagnosis.values)}


def _verdict(exercise, status, lang, checks=(), diagnosis=None, metrics=None, output=""):
    return {
        "version": VERDICT_VERSION,
        "exercise": exercise.id,
        "status": status,
        "diagnosis": _diagnosis(diagnosis, lang),
        "checks": [_check(c, lang) for c in checks],
        "metrics": metrics or {},
        "output": output,
    }


def _cap(output: str, limit_kb: int) -> str:
    limit = limit_kb * 1024
    return output if len(output) <= limit else output[:limit] + "\n[…]"


def validate(exercise, code: bytes) -> Check | None:
    """Why ``code`` is refused before running, or None."""
    limit = exercise.limits.code_kb
    if len(code) > limit * 1024:
        return Check("input", False, "rejected.too_large",
                     {"size": round(len(code) / 1024, 1), "limit": limit})
    if b"\x00" in code:
        return Check("input", False, "rejected.not_text", {})
    try:
        code.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Check("input", False, "rejected.not_utf8", {"offset": exc.start})
    return None


def syntax_error(code: bytes) -> dict | None:
    """The syntax error of ``code`` as the harness would report it, found without running it."""
    try:
        compile(code.decode("utf-8"), "submission.py", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return {"phase": "syntax", "type": type(exc).__name__, "message": exc.msg,
                "line": exc.lineno, "code": (exc.text or "").strip()[:200]}
    except (RecursionError, MemoryError):
        return {"phase": "syntax", "type": "SyntaxError", "message": "too deeply nested",
                "line": 0, "code": ""}
    return None


def _error_check(error: dict, entry: str) -> Check:
    phase, kind = error.get("phase"), error.get("type", "")
    if phase == "syntax":
        return Check("run", False, "error.syntax",
                     {"line": error.get("line") or 0, "message": error.get("message", ""),
                      "code": error.get("code", "")})
    if kind == "MissingFunction":
        return Check("run", False, "error.missing_function", {"entry": entry})
    if kind == "WrongSignature":
        expected = error.get("expected", [])
        return Check("run", False, "error.signature",
                     {"entry": entry, "count": len(expected), "expected": ", ".join(expected)})
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


def grade(exercise, code: bytes, lang: str = "en", device: str | None = None, *,
          run_only: bool = False, cancel: sandbox.Cancel | None = None) -> dict[str, Any]:
    """The verdict of ``code`` for ``exercise`` (texts in ``lang``); ``device`` defaults to
    the worker's (``TREINO_DEVICE``). ``run_only``: run it and measure, judge nothing (status
    "passed" then means "it ran"); ``cancel`` ends the run at once. Always strict JSON, and at
    most VERDICT_BYTES."""
    return seal(_grade(exercise, code, language(lang), device, run_only, cancel),
                exercise.limits.output_kb)


VERDICT_BYTES = 256 * 1024


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def seal(verdict: dict[str, Any], output_kb: int) -> dict[str, Any]:
    """The verdict as it may be stored and sent: strict JSON (a learner's NaN loss becomes
    null, never a value PostgreSQL refuses) and bounded in size (the output and the messages
    are cut first)."""
    verdict = _finite(verdict)
    if len(json.dumps(verdict, allow_nan=False)) > VERDICT_BYTES:
        verdict["output"] = _cap(verdict.get("output", ""), min(output_kb, 16))
        for check in verdict.get("checks", []):
            check["message"] = _cap(check["message"], 2)
    if len(json.dumps(verdict, allow_nan=False)) > VERDICT_BYTES:
        verdict = {**verdict, "checks": verdict["checks"][:20], "metrics": {}}
    return verdict


def _grade(exercise, code: bytes, lang: str, device: str | None, run_only: bool,
           cancel: sandbox.Cancel | None) -> dict[str, Any]:
    refused = validate(exercise, code)
    if refused is not None:
        return _verdict(exercise, "rejected", lang, [refused])
    syntax = syntax_error(code)  # the commonest mistake gets its answer without a sandbox
    if syntax is not None:
        return _verdict(exercise, "error", lang, [_error_check(syntax, exercise.entry)])
    limits = _limits(exercise)
    setup = sandbox.setup()
    device = device or setup.device
    job = {"entry": exercise.entry, "params": exercise.check_params, "device": device}
    checks_module = kind_module(exercise.check_kind)
    result = pool.run(exercise.check_kind, job, code, limits, cancel)
    # "process" means the learner's code ran without isolation: pages say so plainly
    metrics: dict[str, Any] = {"device": device, "sandbox_ms": result.wall_ms,
                               "isolation": setup.isolation}
    if result.status == "timeout":
        check = Check("run", False, "error.timeout", {"seconds": limits.wall_seconds})
        return _verdict(exercise, "timeout", lang, [check], metrics=metrics,
                        output=_cap(result.output, limits.output_kb))
    if result.status == "crashed":
        check = (Check("run", False, "error.interfered", {}) if result.reason == sandbox.INVALID_TRACE
                 else Check("run", False, "error.crashed", {"reason": result.reason}))
        return _verdict(exercise, "error", lang, [check], metrics=metrics,
                        output=_cap(result.output, limits.output_kb))
    try:
        return _judge(exercise, result.trace, result.output, checks_module, metrics, lang, device,
                      run_only)
    except Exception:  # a trace the harness did not write (the learner forged it): no verdict
        log.warning("%s: trace not understood", exercise.id, exc_info=True)
        check = Check("run", False, "error.interfered", {})
        return _verdict(exercise, "error", lang, [check], metrics=metrics,
                        output=_cap(result.output, limits.output_kb))


def _judge(exercise, trace, process_output, checks_module, metrics, lang, device, run_only=False):
    limits = exercise.limits
    # the learner's prints, then anything written to the process's own stdout/stderr
    output = _cap(trace.get("output", "") + process_output, limits.output_kb)
    metrics |= {f"harness_{k}": v for k, v in (trace.get("timings") or {}).items()}
    started = time.perf_counter()
    if trace.get("outcome") != "ok":
        error = trace.get("error") or {}
        diagnosis = checks_module.diagnose_error(exercise.check_params, trace.get("data"), error)
        metrics["check_ms"] = round((time.perf_counter() - started) * 1000)
        return _verdict(exercise, "error", lang, [_error_check(error, exercise.entry)],
                        diagnosis, metrics, output)
    if run_only:  # what the loop did (steps, losses…) where the kind can tell; no pass/fail
        summarize = getattr(checks_module, "summarize", None)
        measured = summarize(exercise.check_params, trace["data"]) if summarize else {}
        metrics = {**measured, **metrics, "check_ms": round((time.perf_counter() - started) * 1000)}
        return _verdict(exercise, "passed", lang, metrics=metrics, output=output)
    evaluation: Evaluation = checks_module.evaluate(exercise.check_params, trace["data"], device)
    metrics = {**evaluation.metrics, **metrics,
               "check_ms": round((time.perf_counter() - started) * 1000)}
    status = "passed" if evaluation.passed else "failed"
    return _verdict(exercise, status, lang, evaluation.checks, evaluation.diagnosis, metrics,
                    output)


def prepare(exercises, device: str | None = None) -> None:
    """Make a worker's first verdict as quick as the next: compute every exercise's reference
    (and pay torch's lazy first-use costs, seconds) at start-up, not in a learner's wait."""
    import torch

    # the worker's own tensors are tiny: a second thread only spins, against the sandbox too
    torch.set_num_threads(1)
    device = device or sandbox.setup().device
    for exercise in exercises:
        prepare_kind = getattr(kind_module(exercise.check_kind), "prepare", None)
        if prepare_kind is not None:
            prepare_kind(exercise.check_params, device)


MARKS = {"passed": "✓", "failed": "✗"}


def format_verdict(verdict: dict, lang: str = "en") -> str:
    """The verdict as readable terminal text."""
    lang = language(lang)
    status = verdict["status"]
    lines = [f"{text(f'verdict.status.{status}', lang)} — {verdict['exercise']}"]
    diagnosis = verdict.get("diagnosis")
    if diagnosis:
        lines += ["", f"{text('verdict.diagnosis', lang)}: {diagnosis['title']} ({diagnosis['id']})",
                  f"  {diagnosis['explanation']}"]
    if verdict["checks"]:
        lines += [""] + [f"  {MARKS[c['status']]} {c['name']}: {c['message']}"
                         for c in verdict["checks"]]
    metrics = verdict.get("metrics") or {}
    shown = [(key, metrics[key]) for key in (
        "optimizer_steps", "update_ratio", "peak_activation_bytes",
        "reference_peak_activation_bytes", "device", "sandbox_ms", "check_ms") if key in metrics]
    if shown:
        lines += ["", text("verdict.metrics", lang) + ":"]
        lines += [f"  {text(f'metric.{key}', lang)}: "
                  f"{number(value, lang) if value is not None else '—'}" for key, value in shown]
    if verdict.get("output"):
        lines += ["", text("verdict.output", lang) + ":"]
        lines += ["  " + line for line in verdict["output"].rstrip("\n").splitlines()]
    return "\n".join(lines)


def check_exercise(exercise) -> list[str]:
    """Problems with an exercise's own files; an empty list means it is sound."""
    folder = Path(exercise.path)
    mistakes = sorted((folder / "mistakes").glob("*.py"))
    files = [folder / "solution.py", *mistakes]
    # one sandbox per file, as for learners; several at once to use the cores (one job per GPU)
    workers = 1 if sandbox.setup().device == "cuda" else min(len(files), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as threads:
        verdicts = list(threads.map(lambda path: grade(exercise, path.read_bytes()), files))
    problems = []
    solution = verdicts[0]
    if solution["status"] != "passed":
        reason = "; ".join(c["message"] for c in solution["checks"] if c["status"] == "failed")
        problems.append(f"{exercise.id}: solution.py does not pass ({solution['status']}: {reason})")
    if not mistakes:
        problems.append(f"{exercise.id}: no mistakes/<diagnosis-id>.py files")
    for path, verdict in zip(mistakes, verdicts[1:], strict=True):
        found = (verdict["diagnosis"] or {}).get("id")
        if verdict["status"] == "passed":
            problems.append(f"{exercise.id}: mistakes/{path.name} passes")
        elif found != path.stem:
            problems.append(f"{exercise.id}: mistakes/{path.name} is diagnosed as {found} "
                            f"({verdict['status']})")
    return problems
