"""The `treino` command. It sits on the worker side because worker may import app, never the
reverse; heavy imports (uvicorn, torch) happen inside the subcommand that needs them."""

import argparse
import sys

from app.config import Settings, get_settings
from app.lessons.content import ContentError, load_course


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="treino", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the tutor (migrates the database first)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=_serve)

    db = sub.add_parser("db", help="database chores").add_subparsers(dest="db", required=True)
    db.add_parser("upgrade", help="apply migrations").set_defaults(run=_db_upgrade)

    lessons = sub.add_parser("lessons", help="course content chores")
    lessons_sub = lessons.add_subparsers(dest="lessons", required=True)
    lessons_sub.add_parser("check", help="validate every lesson, quiz and exercise").set_defaults(
        run=_lessons_check)

    args = parser.parse_args(argv)
    try:
        settings = get_settings()
    except ValueError as e:  # pydantic's ValidationError: say why in one line
        print(f"treino: configuration: {_first_line(e)}", file=sys.stderr)
        return 2
    try:
        return args.run(settings, args)
    except ContentError as e:
        print(f"treino: {e}", file=sys.stderr)
        return 1


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.db import upgrade
    from app.main import create_app

    app = create_app(settings)  # validates the lessons before anything listens
    upgrade(settings.database_url)
    print(f"treino: serving http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, proxy_headers=True)
    return 0


def _db_upgrade(settings: Settings, _args: argparse.Namespace) -> int:
    from app.db import upgrade

    upgrade(settings.database_url)
    print("treino: database is up to date", file=sys.stderr)
    return 0


def _lessons_check(settings: Settings, _args: argparse.Namespace) -> int:
    course = load_course(settings.lessons_dir)
    exercises = course.exercises
    print(f"treino: {len(course.lessons)} lessons, "
          f"{sum(len(lesson.questions) for lesson in course.lessons)} quick-check questions, "
          f"{len(exercises)} exercises: content OK")
    return 0


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return " ".join(lines[1:3]) if len(lines) > 1 else str(error)


if __name__ == "__main__":
    sys.exit(main())
