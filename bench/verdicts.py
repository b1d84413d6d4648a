"""One exercise's check three ways: in this process (the floor), in a cold sandbox, from the
warm pool. The last two go through ``Grader.grade``, exactly as the worker does."""

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch

from bench import settle  # noqa: E402
from bench.report import Samples  # noqa: E402
from worker import sandbox  # noqa: E402
from worker.checks import kind_module  # noqa: E402
from worker.grading import Grader  # noqa: E402
from worker.harness import runtime, trace_schema  # noqa: E402


@contextlib.contextmanager
def _as_in_a_sandbox():
    """The harness's view: one intra-op thread (the sandbox sets OMP_NUM_THREADS=1), this
    process's cwd and streams put back afterwards."""
    threads, cwd = torch.get_num_threads(), os.getcwd()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        os.chdir(cwd)
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def _check_here(exercise, code: bytes, device: str = "cpu") -> tuple[float, bool, list[str]]:
    """The harness's ``runtime.main`` on a temporary job dir, then the checks on its trace, in
    this process, which the harness hardens as it does a sandbox's (see ``_in_a_child``)."""
    spec = {
        "entry": exercise.entry,
        "params": exercise.check_params,
        "device": device,
        "kind": exercise.check_kind,
        "output_limit": exercise.limits.output_kb * 1024,
        "trace_limit": sandbox.TRACE_LIMIT,
    }
    checks = kind_module(exercise.check_kind)
    with tempfile.TemporaryDirectory(prefix="treino-bench-job-") as work, _as_in_a_sandbox():
        Path(work, runtime.SPEC_FILE).write_text(json.dumps(spec))
        Path(work, runtime.SUBMISSION).write_bytes(code)
        with tempfile.TemporaryFile() as out:  # the descriptor the harness writes its trace into
            started = time.perf_counter()
            runtime.main(work, out.fileno())
            out.seek(0)
            trace = trace_schema.parse(out.read())
        evaluation = checks.evaluate(exercise.check_params, trace["data"], device)
        took = (time.perf_counter() - started) * 1000
    return took, evaluation.passed, [c.name for c in evaluation.checks if not c.passed]


def _in_a_child(run: Callable[[], Any]) -> Any:
    """``run()`` in a forked child, its JSON-able result back here. The harness hardens the
    process it runs in (deaf to the signals it can ignore, a subreaper, not dumpable), as it
    should a sandbox's; this process must stay as it was (a bench, a test session)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's exit handlers
        os.close(read)
        try:
            answer = ["ok", run()]
        except BaseException as exc:
            answer = ["error", f"{type(exc).__name__}: {exc}"]
        with os.fdopen(write, "w") as f:
            f.write(json.dumps(answer))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    status, value = json.loads(text) if text else ["error", "the child died without an answer"]
    if status != "ok":
        raise RuntimeError(f"the in-process check failed: {value}")
    return value


def in_process_once(exercise, code: bytes) -> tuple[float, bool, list[str]]:
    """One check in-process (in a child of this process): (ms, passed, the failed checks)."""
    took, passed, failed = _in_a_child(lambda: _check_here(exercise, code))
    return took, passed, failed


def in_process(exercise, code: bytes, runs: int) -> Samples:
    def timed() -> list[float]:
        _check_here(exercise, code)  # first use: lazy torch set-up, the reference computed
        ms = []
        for _ in range(runs):
            took, passed, _failed = _check_here(exercise, code)
            if not passed:
                raise RuntimeError(f"{exercise.id}: the solution did not pass in-process")
            ms.append(took)
        return ms

    samples = Samples()
    samples.ms.extend(_in_a_child(timed))
    return samples


def _graded(grader: Grader, exercise, code: bytes, samples: Samples) -> None:
    started = time.perf_counter()
    verdict = grader.grade(exercise, code)
    samples.ms.append((time.perf_counter() - started) * 1000)
    if verdict["status"] != "passed":
        raise RuntimeError(f"{exercise.id}: the solution was {verdict['status']}: {verdict}")
    samples.metrics.append(verdict["metrics"])


def cold(settings, exercise, code: bytes, runs: int) -> Samples:
    """A sandbox started for each submission (a grader with no warm pool)."""
    samples = Samples()
    with Grader.running(settings, 0) as grader:
        grader.prepare([exercise])  # the reference, as a started worker has it
        for _ in range(runs):
            _graded(grader, exercise, code, samples)
    return samples


def warm(settings, exercise, code: bytes, runs: int, size: int) -> Samples:
    """From a pool of ``size`` single-use sandboxes, each run once every sandbox in it is warm
    (bench/forks.py measures the fork path)."""
    samples = Samples()
    exec_only = settings.model_copy(update={"sandbox_start": "exec"})
    sandboxes = max(size, 1)
    with Grader.running(exec_only, sandboxes) as grader:
        for _ in range(runs):
            settle.wait_quiet(os.getpid(), sandboxes, include_root=False)
            _graded(grader, exercise, code, samples)
    return samples
