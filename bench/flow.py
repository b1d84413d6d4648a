"""A submission's way from the POST to the page, in modules: which of the project's modules it
crosses and how often it turns back into one it had left (issue 47's measure of the house).

    .venv/bin/python -m bench.flow [--lessons DIR]

One learner's submission to accumulate, in one process: the POST (TestClient), the worker's
claim and grading (``Worker.run_once`` with the real ``Grader``, a cold sandbox), and the page's
status fragment. Every call from one of the project's modules (``app``, ``contracts``,
``worker``; the harness runs in the sandbox's own process and is not seen) into another is
recorded: ``crossed`` counts the distinct modules called, ``turns back`` counts the calls into
a module that is already lower on the stack (B called by A calls A again: a cycle at run
time; an ASGI middleware's ``send`` wrapper, called by the middleware inside it, counts too).
Figures, not a test: it prints them. ``--root`` measures another checkout of the project with
this script (an older commit: ``git worktree add``); ``TREINO_SANDBOX=process`` compares it
with one that has no bubblewrap.
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

PROJECT = ("app", "contracts", "worker")
EXERCISE_URL = "/lessons/gradient-accumulation/exercises/accumulate"


def _module(filename: str, root: str) -> str | None:
    if not filename.startswith(root):
        return None
    rel = filename[len(root) :].lstrip("/")
    if not rel.endswith(".py") or not rel.startswith(PROJECT):
        return None
    return rel[:-3].replace("/", ".").removesuffix(".__init__")


class Tracer:
    def __init__(self, root: str) -> None:
        self.root = root
        self.crossed: set[str] = set()
        self.calls = 0  # calls from one module into another
        self.turns: list[tuple[str, str]] = []
        self.stacks: dict[int, list[str]] = {}
        self.on = False  # set once the warm-up is done

    def __call__(self, frame: Any, event: str, _arg: Any) -> None:
        import threading

        if not self.on:
            return
        stack = self.stacks.setdefault(threading.get_ident(), [])
        if event == "call":
            module = _module(frame.f_code.co_filename, self.root)
            caller = stack[-1] if stack else None
            if module is not None and module != caller:
                self.crossed.add(module)
                if caller is not None:
                    self.calls += 1
                    if module in stack:
                        self.turns.append((caller, module))
            stack.append(module or caller or "")
        elif event == "return" and stack:
            stack.pop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args(argv)
    root = str(Path(args.root).resolve())
    sys.path.insert(0, root)
    import threading

    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.db import upgrade
    from app.main import create_app
    from worker.grading import Grader
    from worker.runner import Worker

    tmp = Path(tempfile.mkdtemp(prefix="treino-flow-"))
    url = f"sqlite:///{tmp / 'treino.db'}"
    upgrade(url)
    settings = Settings(database_url=url, lessons_dir=Path(root) / "lessons", _env_file=None)
    app = create_app(settings)
    code = (Path(root) / "lessons/02-gradient-accumulation/exercises/accumulate/solution.py").read_bytes()
    tracer = Tracer(root)
    sys.setprofile(tracer)  # before the client's thread starts: it serves the requests
    threading.setprofile(tracer)
    try:
        with TestClient(app) as client, Grader.running(settings, pool_size=0) as grader:
            body = client.get("/sign-up").text
            token = json.loads(re.search(r"hx-headers='([^']+)'", body)[1])["X-CSRF-Token"]  # type: ignore[index]
            client.headers["X-CSRF-Token"] = token
            client.get(EXERCISE_URL)  # warm: imports and the first render are not the way
            tracer.on = True
            response = client.post(
                f"{EXERCISE_URL}/submissions", data={"code": code.decode()}, headers={"HX-Request": "true"}
            )
            poll = re.search(r'id="submission-status"[^>]*hx-get="([^"]+)"', response.text)
            with Worker(settings, grade=grader.grade) as worker:
                worker.run_once()
            page = client.get(poll[1] if poll else EXERCISE_URL, headers={"HX-Request": "true"})
            tracer.on = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    print(f"POST: {response.status_code}; page: {page.status_code}")
    passed = "state-passed" in page.text
    print(f"verdict on the page: {'passed' if passed else 'NOT passed'}")
    print(f"modules crossed: {len(tracer.crossed)}; calls between modules: {tracer.calls}")
    print(f"turns back (a call into a module lower on the stack): {len(tracer.turns)}")
    for pair, n in sorted({p: tracer.turns.count(p) for p in set(tracer.turns)}.items(), key=lambda x: -x[1])[
        :12
    ]:
        print(f"  {n:5d}  {pair[0]} -> {pair[1]}")
    print("modules:", " ".join(sorted(tracer.crossed)))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
