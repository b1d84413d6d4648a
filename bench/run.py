"""Measure the learner's waits on this machine and write docs/benchmarks.md.

    make bench                       # or: .venv/bin/python -m bench [options]

Everything it starts (sandboxes, `treino serve`, workers, scratch databases, temp dirs) it
stops. Machines are noisy: the ratios are the headline, the milliseconds are this machine's.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from app.config import ROOT
from bench import forks

EXERCISE = "gradient-accumulation/accumulate"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--in-process", type=int, default=20, metavar="N", help="in-process runs")
    parser.add_argument("--cold", type=int, default=5, metavar="N", help="cold-sandbox runs")
    parser.add_argument("--warm", type=int, default=10, metavar="N", help="warm-pool runs")
    parser.add_argument(
        "--submissions", type=int, default=20, metavar="N", help="end-to-end submissions per database"
    )
    parser.add_argument(
        "--page-seconds", type=float, default=5, metavar="S", help="load per page and database"
    )
    parser.add_argument(
        "--queue-jobs",
        type=int,
        default=12,
        metavar="N",
        help="submissions sent at once for the throughput figures",
    )
    parser.add_argument(
        "--forked", type=int, default=10, metavar="N", help="fork-server runs in this process (the breakdown)"
    )
    parser.add_argument(
        "--cli-cold",
        type=int,
        default=3,
        metavar="N",
        help="`treino check` runs, each a new process (the cold reference)",
    )
    parser.add_argument(
        "--resubmits",
        type=int,
        default=forks.RESUBMITS,
        metavar="N",
        help="back-to-back submissions by one learner, per database (fork path)",
    )
    parser.add_argument(
        "--learners",
        type=int,
        default=forks.LEARNERS,
        metavar="N",
        help="learners submitting at once, per database (fork path)",
    )
    parser.add_argument(
        "--class-sizes",
        default="100,300",
        metavar="N,N",
        help="learners, each an account and an address, pressing Submit at once, per database",
    )
    parser.add_argument(
        "--no-same-verdicts", action="store_true", help="skip grading every exercise's files both ways"
    )
    parser.add_argument(
        "--only",
        choices=("all", "forks"),
        default="all",
        help="forks: only the fork path's figures and the cold references",
    )
    parser.add_argument(
        "--backends",
        default="sqlite,postgresql",
        help="databases for the HTTP figures (PostgreSQL is skipped if unreachable)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=ROOT / "docs" / "benchmarks.md",
        help="where the report goes ('-': nowhere)",
    )
    return parser.parse_args(argv)


STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"bench [{time.monotonic() - STARTED:5.0f} s] {message}", file=sys.stderr, flush=True)


def _postgres_version() -> str | None:
    from sqlalchemy import create_engine, text

    from bench.stack import POSTGRES_URL

    engine = create_engine(POSTGRES_URL)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SHOW server_version")).scalar()
    except Exception as exc:  # no server here: the PostgreSQL figures are skipped, said so
        say(f"PostgreSQL unreachable ({type(exc).__name__}): its figures are skipped")
        return None
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    # heavy imports after --help
    from app.config import get_settings
    from bench import class_report, machine, report, verdicts
    from contracts.exercise import load_exercises
    from worker import sandbox

    settings = get_settings()
    setup = sandbox.setup(settings.sandbox, settings.device)
    course = load_exercises(settings.lessons_dir)
    exercise = course.exercise(EXERCISE)
    assert exercise is not None, f"the course has lost {EXERCISE}"
    code = (Path(exercise.path) / "solution.py").read_bytes()
    postgres = _postgres_version()
    backends = [b for b in args.backends.split(",") if b and (b != "postgresql" or postgres)]
    about = machine.describe(setup.isolation, setup.device, settings.pool_size, postgres or "not reachable")
    results = report.Results(exercise.id)

    everything = args.only == "all"
    if everything:
        say(f"{exercise.id}: in-process × {args.in_process}")
        results.add_ms("in-process", verdicts.in_process(exercise, code, args.in_process))
    say(f"cold sandbox × {args.cold}")
    results.add_ms("cold", verdicts.cold(settings, exercise, code, args.cold))
    if everything:
        say(f"warm pool of {settings.pool_size} × {args.warm}")
        results.add_ms("warm", verdicts.warm(settings, exercise, code, args.warm, settings.pool_size))
    results.forks = _forks(args, setup, course, exercise, code, backends, settings.pool_size)
    if everything:
        _exec_stacks(args, results, exercise, code, backends, settings.pool_size)
    results.bursts = _classes(args, code.decode(), backends, settings.pool_size)
    about["A class of 500 learners × 12 exercises (bench/class_report.py)"] = class_report.summary(
        settings.lessons_dir, backends
    )
    about["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    about["bench took"] = f"{(time.monotonic() - started) / 60:.1f} min"
    text = report.markdown(about, results, sys.argv[1:] if argv is None else argv)
    print(text)
    if str(args.output) != "-":
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        say(f"written to {args.output}")
    return 0


def _forks(args, setup, course, exercise, code: bytes, backends: list[str], pool_size: int):
    """The fork path (issue 14): `treino check` cold, forks graded here, a learner resubmitting
    and a class at once through the running tutor, and verdicts compared with single-use ones."""
    from bench import traffic
    from bench.stack import Stack

    figures = forks.ForkFigures(learners=args.learners)
    say(f"`treino check`, a new process × {args.cli_cold}")
    figures.cli_cold = forks.cli_cold(exercise, args.cli_cold)
    say(f"fork server × {args.forked}")
    figures.parts = forks.forked(setup, exercise, code, args.forked)
    for backend in backends:
        with Stack(backend, pool_size, start="fork") as stack:
            worker = stack.add_worker()
            say(f"{backend}, fork path: {args.resubmits} submissions back to back by one learner")
            figures.resubmit[backend] = forks.resubmit(stack, exercise.id, code.decode(), args.resubmits)
            figures.pick_up[backend] = traffic.pick_up_ms(stack)  # one at a time: no queue yet
            say(f"{backend}, fork path: {args.learners} learners at once")
            figures.classroom[backend] = forks.classroom(stack, exercise.id, code.decode(), args.learners)
            worker.check()
    if not args.no_same_verdicts:
        say("every solution and mistake graded both ways")
        figures.same = forks.same_verdicts(setup, course)
    return figures


def _classes(args, code: str, backends: list[str], pool_size: int) -> list:
    """A class at once through `treino serve` (issue 26): a fresh stack per size and database."""
    from bench import load
    from bench.stack import Stack

    bursts = []
    for backend in backends:
        for learners in (int(n) for n in args.class_sizes.split(",") if n):
            with Stack(backend, pool_size, start="fork") as stack:
                stack.add_worker()
                say(f"{backend}: {learners} learners press Submit at once")
                bursts.append(load.burst(stack, learners, code))
    return bursts


def _exec_stacks(args, results, exercise, code: bytes, backends: list[str], pool_size: int) -> None:
    """Today's end-to-end, page and queue figures, through workers with warm pools of single-use
    sandboxes."""
    from bench import report, settle, traffic
    from bench.stack import Stack

    lesson_path = f"/lessons/{exercise.lesson}"
    for backend in backends:
        with Stack(backend, pool_size) as stack:
            worker = stack.add_worker()
            say(f"{backend}: serving at {stack.base}; worker {worker.pid} warming up")
            settle.wait_quiet(worker.pid, stack.warm)
            for name, path in (("lesson", lesson_path), ("static", report.STATIC_FILE)):
                say(f"{backend}: {path} for {args.page_seconds:g} s")
                results.rps[(name, backend)] = traffic.requests_per_second(stack, path, args.page_seconds)
            say(f"{backend}: {args.submissions} submissions end to end")
            results.e2e[backend] = traffic.end_to_end(stack, exercise.id, code.decode(), args.submissions)
            results.pick_up[backend] = traffic.pick_up_ms(stack)
            if backend == "postgresql":
                for count in (1, 2):
                    if len(stack.workers) < count:
                        stack.add_worker()
                    say(f"{backend}: {args.queue_jobs} submissions at once, {count} worker(s)")
                    results.per_minute[count] = traffic.throughput(
                        stack, exercise.id, code.decode(), args.queue_jobs
                    )
            say(f"{backend}: stopping")
