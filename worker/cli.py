"""The `treino` command. It sits on the worker side because worker may import app, never the
reverse; heavy imports (uvicorn, torch) happen inside the subcommand that needs them."""

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from app import logs
from app.config import Settings, get_settings
from contracts.exercise import ContentError, load_exercises
from contracts.languages import LANGS
from worker.harness import linux, quiet

if TYPE_CHECKING:
    from app.lessons.course import Course

WORKER_NICENESS = 10  # `treino worker` and its sandboxes yield the CPU to the web (docs/deploy.md)


def main(argv: list[str] | None = None) -> int:
    quiet.silence()  # torch's notice that NumPy is absent
    parser = argparse.ArgumentParser(prog="treino", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the tutor (migrates the database first)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--no-worker", action="store_true", help="do not supervise a grading worker alongside the web"
    )
    serve.set_defaults(run=_serve)

    sub.add_parser("worker", help="run one grading worker").set_defaults(run=_worker)

    check = sub.add_parser("check", help="grade one file the way the worker would, without a database")
    check.add_argument("exercise", metavar="EXERCISE_ID", help="e.g. gradient-accumulation/accumulate")
    check.add_argument("file", metavar="FILE", type=argparse.FileType("rb"))
    check.add_argument("--json", action="store_true", help="print the verdict object")
    check.add_argument("--lang", default="en", choices=LANGS)
    check.set_defaults(run=_check)

    db = sub.add_parser("db", help="database chores").add_subparsers(dest="db", required=True)
    db.add_parser("upgrade", help="apply migrations").set_defaults(run=_db_upgrade)

    lessons = sub.add_parser("lessons", help="course content chores")
    lessons_sub = lessons.add_subparsers(dest="lessons", required=True)
    lessons_sub.add_parser("check", help="validate every lesson, quiz and exercise").set_defaults(
        run=_lessons_check
    )

    accounts = sub.add_parser("accounts", help="account chores for an operator")
    accounts_sub = accounts.add_subparsers(dest="accounts", required=True)
    reset = accounts_sub.add_parser(
        "reset-password", help="print a one-time link (valid for an hour) to choose a new password"
    )
    reset.add_argument("email", metavar="EMAIL")
    reset.set_defaults(run=_reset_password)

    args = parser.parse_args(argv)
    try:
        settings = get_settings()
    except ValueError as e:  # pydantic's ValidationError: say why in one line
        print(f"treino: configuration: {_first_line(e)}", file=sys.stderr)
        return 2
    from worker.sandbox import SandboxUnavailable  # stdlib only: no torch for the web

    logs.setup(settings.log_format)
    try:
        return args.run(settings, args)
    except ContentError as e:
        print(f"treino: {e}", file=sys.stderr)
        return 1
    except SandboxUnavailable as e:
        print(f"treino: sandbox: {e}", file=sys.stderr)
        return 2


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.capacity import server_options
    from app.db import upgrade
    from app.main import create_app
    from worker.sandbox import isolation

    if not args.no_worker:
        isolation(settings.sandbox)  # TREINO_SANDBOX=bwrap without a working bwrap: stop here
    if settings.public_url is None:  # development: learners reach it where it listens
        local = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
        local = f"[{local}]" if ":" in local else local
        settings = settings.model_copy(update={"public_url": f"http://{local}:{args.port}"})
    app = create_app(settings)  # validates the lessons before anything listens
    upgrade(settings.database_url)
    print(f"treino: serving http://{args.host}:{args.port}", file=sys.stderr)
    # a signal before uvicorn takes them over (it gives them back when it stops) still unwinds
    # through supervised_worker's cleanup: the worker and its sandboxes go too
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with contextlib.nullcontext() if args.no_worker else supervised_worker():
        uvicorn.run(
            app,
            host=args.host,
            port=args.port,
            proxy_headers=False,  # the app believes X-Forwarded-* itself, from the proxies named
            log_config=None,
            **server_options(settings.request_seconds),  # headers in time (app/capacity.py)
        )
    return 0


def _worker(settings: Settings, _args: argparse.Namespace) -> int:
    from app.db import upgrade
    from worker import runner, sandbox

    # grading is batch work: where the web shares the machine, a class's burst of it never
    # takes the CPU from the web's answers (the sandboxes inherit it)
    current = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, max(current, WORKER_NICENESS))
    sandbox.setup(settings.sandbox, settings.device)  # one missing: stop before any job
    upgrade(settings.database_url)
    return runner.main(settings)


def _check(settings: Settings, args: argparse.Namespace) -> int:
    from contracts.verdict import render
    from worker.grading import Grader, format_verdict

    exercise = load_exercises(settings.lessons_dir).exercise(args.exercise)
    if exercise is None:
        print(f"treino: no exercise {args.exercise!r} (see `treino lessons check`)", file=sys.stderr)
        return 2
    with args.file as f:
        code = f.read()
    with Grader.running(settings, pool_size=0) as grader:
        verdict = grader.grade(exercise, code)
    if args.json:
        print(json.dumps(render(verdict, args.lang), ensure_ascii=False, indent=2))
    else:
        print(printable(format_verdict(verdict, args.lang)))
    return 0 if verdict["status"] == "passed" else 1


# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides: what a learner's
# output could use to retitle the window, fill the clipboard (OSC 52), clear or redraw the screen
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every terminal control written out as an escape (ESC as \\x1b), so that the
    learner's output in a plain verdict is shown, never obeyed, by the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text)


def _db_upgrade(settings: Settings, _args: argparse.Namespace) -> int:
    from app.db import upgrade

    upgrade(settings.database_url)
    print("treino: database is up to date", file=sys.stderr)
    return 0


def _reset_password(settings: Settings, args: argparse.Namespace) -> int:
    """For an instance without e-mail: the link the learner would have been mailed
    (TREINO_PUBLIC_URL says where the tutor is reached)."""
    from sqlalchemy.orm import sessionmaker

    from app.accounts import lifecycle, service
    from app.db import make_engine

    engine = make_engine(settings.database_url)
    try:
        with sessionmaker(engine).begin() as session:
            user = service.find_user(session, args.email)
            if user is None:
                print(f"treino: no account with the e-mail address {args.email!r}", file=sys.stderr)
                return 1
            token = lifecycle.reset_token(user, settings.secret_key.get_secret_value())
            email = user.email
    finally:
        engine.dispose()
    print(lifecycle.reset_link(settings, token))
    print(f"treino: give this link to {email}: it sets a new password once, within an hour", file=sys.stderr)
    return 0


def _lessons_check(settings: Settings, _args: argparse.Namespace) -> int:
    from app.lessons.course import load_course  # the whole course, its texts rendered: the web's
    from worker.grading import Grader

    course = load_course(settings.lessons_dir)
    if _glossary_problems(settings):
        return 1
    exercises = course.exercises
    print(
        f"treino: {len(course.lessons)} lessons, "
        f"{sum(len(lesson.questions) for lesson in course.lessons)} quick-check questions, "
        f"{len(exercises)} exercises: content OK"
    )
    if _prove_claims(course):
        return 1
    failures = 0
    # warm sandboxes: torch is imported while the previous file runs
    with Grader.running(settings) as grader:
        for exercise in exercises:
            started = time.monotonic()
            problems = grader.check_exercise(exercise)
            took = time.monotonic() - started
            print(f"  {exercise.id}: {'OK' if not problems else 'FAILED'} ({took:.1f} s)")
            for problem in problems:
                print(f"    - {problem}")
            failures += bool(problems)
    if failures:
        print(f"treino: {failures} of {len(exercises)} exercises failed their own proof", file=sys.stderr)
        return 1
    return 0


def _prove_claims(course: "Course") -> int:
    """Run every CPU claim's proof (lessons/*/claims.yaml); the CUDA ones wait for `make gpu-check`.
    Returns the number of proofs that failed."""
    from app.lessons.proofs import prove

    claims = course.claims
    cpu = [claim for claim in claims if claim.device == "cpu"]
    waiting = [claim for claim in claims if claim.device != "cpu"]
    started = time.monotonic()
    results = prove(cpu)
    proven = sum(r.ok for r in results)
    print(
        f"treino: {proven} of {len(claims)} claims proven ({time.monotonic() - started:.1f} s on the CPU)"
        + (f"; {len(waiting)} wait for a GPU (`make gpu-check`):" if waiting else "")
    )
    for claim in waiting:
        print(f"  {claim.card.lesson}/{claim.id}: waiting for a GPU ({claim.proof.name})")
    for r in results:
        if not r.ok:
            print(f"  {r.claim.card.lesson}/{r.claim.id}: FAILED ({r.claim.proof}): {r.error}")
    return len(results) - proven


def _glossary_problems(settings: Settings) -> int:
    """Every Portuguese text a learner reads uses the glossary's words (lessons/glossary.yaml)."""
    from app.i18n import po_path
    from app.lessons import glossary
    from contracts.messages import CATALOGUES

    words = glossary.load(settings.lessons_dir / glossary.GLOSSARY_FILE)
    problems = words.problems(settings.lessons_dir, *CATALOGUES, po_path("pt-BR"))
    for problem in problems:
        print(f"treino: {problem}", file=sys.stderr)
    if problems:
        print(f"treino: {len(problems)} Portuguese words outside the glossary", file=sys.stderr)
    return len(problems)


def _terminate_with_parent() -> None:
    """In the worker's child, before exec: SIGTERM when the thread that started it ends (the
    web killed outright leaves no worker behind; SIGTERM lets it put its job back)."""
    linux.die_with_parent(signal.SIGTERM)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(0)


@contextlib.contextmanager
def supervised_worker():
    """A `treino worker` child for as long as the web serves; restarted if it dies."""
    stop = threading.Event()
    child: list[subprocess.Popen] = []

    def supervise() -> None:
        while not stop.is_set():
            # the worker (and so its sandboxes) ends with this thread, however the web ends
            proc = subprocess.Popen(
                [sys.executable, "-m", "worker.cli", "worker"], preexec_fn=_terminate_with_parent
            )
            child[:] = [proc]
            while proc.poll() is None and not stop.wait(0.5):
                pass
            if proc.returncode == 2:  # its configuration cannot work (it said why): no retries
                print("treino: the worker cannot start; serving without grading", file=sys.stderr)
                return
            if not stop.is_set():
                print(f"treino: worker exited ({proc.returncode}); restarting", file=sys.stderr)
                stop.wait(2)

    thread = threading.Thread(target=supervise, name="worker-supervisor", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        for proc in child:
            if proc.poll() is None:
                proc.terminate()  # the worker finishes its current job, then exits
                try:
                    proc.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    proc.kill()
        thread.join(timeout=5)


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[1:3]) if len(lines) > 1 else str(error)


if __name__ == "__main__":
    sys.exit(main())
