"""A class of 500 learners with 12 exercises' submissions: how long its page and its report
(`GET /classes/{id}`, `GET /api/classes/{id}`) take, and how many queries each makes (issue 46:
under 300 ms, a bounded number of queries whatever the class's size).

    .venv/bin/python -m bench.class_report [--learners 500] [--runs 20] [--backends sqlite,postgresql]

Each backend gets a scratch database (a temp SQLite file; a database made and dropped on the
PostgreSQL server bench.stack names), filled straight through SQLAlchemy with what the grader and
the quick checks would have recorded: per learner and exercise one to four graded submissions
(about a third end passed, most failures with a named mistake taken from the exercise's own
mistakes/ folder), and a quick-check answer or two per question."""

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event, insert, text
from sqlalchemy.engine import make_url

from app.config import ROOT, Settings
from app.db import upgrade, utcnow

EXERCISES = 12
# about the sizes of a real row: a learner's loop, a verdict's figures and the program's output
CODE = "for step, (x, y) in enumerate(loader):\n    loss = model(x).sub(y).pow(2).mean() / 4\n" * 18
METRICS = {f"figure_{i}": 1234.5678 * i for i in range(12)} | {"device": "cpu"}
OUTPUT = "epoch 1 step 10 loss 0.4321\n" * 20


@contextmanager
def scratch_database(backend: str) -> Iterator[str]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="treino-bench-class-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'treino.db'}"
        return
    from bench.stack import POSTGRES_URL

    name = f"treino_bench_class_{secrets.token_hex(4)}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def fill(app, learners: int, seed: int = 46) -> tuple[int, str, dict[str, int]]:
    """The class, its teacher's API token and the rows made; returns (class id, token, counts)."""
    from app.accounts import sessions
    from app.accounts.models import User
    from app.classes import service
    from app.classes.models import Member, Role
    from app.quizzes.models import QuizAttempt
    from app.submissions.models import Submission
    from contracts.verdict import check_record, record

    rng = random.Random(seed)
    course = app.state.course
    exercises = course.exercises[:EXERCISES]
    mistakes = {ex.id: sorted(p.stem for p in (Path(ex.path) / "mistakes").glob("*.py")) for ex in exercises}
    now = utcnow()
    with app.state.sessionmaker.begin() as session:
        teacher = User(email="teacher@example.com", password_hash="!", lang="en")
        session.add(teacher)
        session.flush()
        classroom = service.create(session, teacher, "A class of the bench")
        token = sessions.start_session(session, teacher, kind="api", visitor_id="bench-teacher")
        users = [
            {"email": f"learner{i}@example.com", "password_hash": "!", "lang": "en"} for i in range(learners)
        ]
        session.execute(insert(User), users)
        ids = [row[0] for row in session.execute(text("SELECT id FROM users WHERE email LIKE 'learner%'"))]
        session.execute(
            insert(Member),
            [
                {
                    "class_id": classroom.id,
                    "user_id": u,
                    "role": Role.LEARNER,
                    "name": f"Learner {u}",
                    "joined_at": now,
                }
                for u in ids
            ],
        )
        submissions, answers = [], []
        for u in ids:
            for ex in exercises:
                for attempt in range(rng.randint(1, 4)):
                    passed = attempt > 0 and rng.random() < 0.35
                    named = (
                        None
                        if passed or rng.random() < 0.2
                        else (rng.choice(mistakes[ex.id]), {"ratio": 4.0})
                    )
                    verdict = record(
                        ex.id,
                        "passed" if passed else "failed",
                        checks=[check_record("run", not named, "verdict.passed", {}) for _ in range(4)],
                        diagnosis=named,
                        metrics=METRICS,
                        output=OUTPUT,
                    )
                    submissions.append(
                        {
                            "user_id": u,
                            "visitor_id": f"v{u}",
                            "exercise": ex.id,
                            "mode": "submit",
                            "code": CODE,
                            "lang": rng.choice(("en", "pt-BR")),
                            "status": "passed" if passed else "failed",
                            "verdict": verdict,
                            "attempts": 1,
                            "created_at": now,
                        }
                    )
                    if passed:
                        break
            for lesson in course.lessons:
                for question in lesson.questions:
                    for option in rng.sample(question.options, rng.randint(1, 2)):
                        answers.append(
                            {
                                "user_id": u,
                                "visitor_id": f"v{u}",
                                "lesson": lesson.slug,
                                "question": question.id,
                                "option": option.id,
                                "correct": option.correct,
                                "created_at": now,
                            }
                        )
        session.execute(insert(Submission), submissions)
        session.execute(insert(QuizAttempt), answers)
    return classroom.id, token, {"submissions": len(submissions), "quick-check answers": len(answers)}


def measure(database_url: str, learners: int, runs: int, lessons: Path) -> dict[str, object]:
    from fastapi.testclient import TestClient

    from app.accounts import sessions
    from app.accounts.models import User
    from app.main import create_app

    upgrade(database_url)
    settings = Settings(database_url=database_url, lessons_dir=lessons, _env_file=None)
    app = create_app(settings)
    class_id, token, made = fill(app, learners)
    queries = 0

    def count(*_args) -> None:
        nonlocal queries
        queries += 1

    engines = [factory.kw["bind"] for factory in (app.state.sessionmaker, app.state.reader)]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    out: dict[str, object] = {"rows": made}
    with app.state.sessionmaker.begin() as s:  # the page signs in with the cookie, as a browser does
        teacher = s.query(User).filter_by(email="teacher@example.com").one()
        browser = sessions.start_session(s, teacher, kind="browser", visitor_id="bench-teacher")
    asks = (
        ("page", f"/classes/{class_id}", {"Cookie": f"treino_session={browser}"}),
        ("report", f"/api/classes/{class_id}", {"Authorization": f"Bearer {token}"}),
    )
    with TestClient(app) as client:
        for name, path, headers in asks:
            for _ in range(2):  # warm: templates compiled, connections open
                assert client.get(path, headers=headers).status_code == 200
            times, cpu, size = [], [], 0
            for _ in range(runs):
                queries = 0
                started, used = time.perf_counter(), time.process_time()
                response = client.get(path, headers=headers)
                times.append((time.perf_counter() - started) * 1000)
                cpu.append((time.process_time() - used) * 1000)
                assert response.status_code == 200, response.text[:300]
                size = len(response.content)
            times.sort()
            out[name] = {
                "p50_ms": statistics.median(times),
                "p95_ms": times[max(0, int(len(times) * 0.95) - 1)],
                # this process's CPU (the web's threads and, on SQLite, the database's work): what
                # the request costs where it need not wait for a core
                "cpu_ms": statistics.median(cpu),
                "queries": queries,  # of the last run: the same every time
                "bytes": size,
            }
    for factory in (app.state.sessionmaker, app.state.reader):
        factory.kw["bind"].dispose()
    return out


def summary(lessons: Path, backends: list[str], learners: int = 500, runs: int = 20) -> str:
    """One line for `make bench`'s report (bench/run.py): page and report p50, per database."""
    parts = []
    for backend in backends:
        with scratch_database(backend) as url:
            figures = measure(url, learners, runs, lessons)
        said = []
        for name in ("page", "report"):
            f = figures[name]
            assert isinstance(f, dict)
            said.append(f"{name} p50 {f['p50_ms']:.0f} ms (CPU {f['cpu_ms']:.0f} ms, {f['queries']} queries)")
        parts.append(f"{NAMES.get(backend, backend)}: " + ", ".join(said))
    return "; ".join(parts)


NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.class_report", description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument(
        "--lessons", type=Path, default=ROOT / "lessons", help="the course (default: lessons/)"
    )
    args = parser.parse_args(argv)
    for backend in (b for b in args.backends.split(",") if b):
        try:
            with scratch_database(backend) as url:
                figures = measure(url, args.learners, args.runs, args.lessons)
        except Exception as exc:  # no PostgreSQL server here: said, and the other backend still runs
            if backend == "sqlite":
                raise
            print(f"{backend}: skipped ({type(exc).__name__}: {exc})".splitlines()[0], file=sys.stderr)
            continue
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{backend}: a class of {args.learners} learners, {EXERCISES} exercises, {figures['rows']}")
        print(f"  load average {load} on {os.cpu_count()} cores")
        for name in ("page", "report"):
            f = figures[name]
            assert isinstance(f, dict)
            print(
                f"  {name:6} p50 {f['p50_ms']:6.1f} ms  p95 {f['p95_ms']:6.1f} ms  "
                f"CPU p50 {f['cpu_ms']:6.1f} ms  {f['queries']} queries  {f['bytes'] / 1024:.0f} KiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
