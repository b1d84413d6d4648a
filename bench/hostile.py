"""Hostile clients against a real `treino serve` (issue 43): what each attack costs the others.

    python -m bench.hostile                # all three
    python -m bench.hostile slow storage   # some

- slow: 16 connections send a POST's headers, then one byte of its body every 2 s; meanwhile a
  learner's `GET /` is timed, ten times (status and seconds of each).
- storage: 20 fresh visitors (no cookie) from one address each save a 64 KB draft of every
  exercise; the database's size before and after (SQLite, checkpointed).
- tutor: one visitor asks 12 questions, then reads the 12 answers, against a budget of 1,500
  tokens an hour; the tokens charged (the model, a fake one, reports 400 prompt tokens and 100
  of answer for each).

The server is `treino serve --no-worker` in a process of its own, as deployed without a proxy
in front, over a fresh SQLite database. Run from another checkout's code with
``PYTHONPATH=/that/checkout python bench/hostile.py`` for its figures.
"""

import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx2

SLOW_CONNECTIONS = 16
BYTE_EVERY = 2.0  # seconds between two bytes of a slow body
VISITORS = 20
DRAFT_BYTES = 64 * 1024
QUESTIONS = 12
TOKEN_BUDGET = 1500
SERVE = "import sys; from worker.cli import main; sys.exit(main(sys.argv[1:]))"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(folder: Path, **env: str) -> Iterator[tuple[str, Path]]:
    """`treino serve` on a free port over a fresh SQLite file in `folder`: (base URL, the file)."""
    port = _free_port()
    db = folder / "treino.db"
    environ = {
        **os.environ,
        "TREINO_DATABASE_URL": f"sqlite:///{db}",
        "TREINO_SECRET_KEY": "bench-hostile-secret",
        **env,
    }
    log = (folder / "serve.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--no-worker", "--port", str(port)],
        env=environ,
        cwd=folder,  # no .env of a checkout is read
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"treino serve did not start: {(folder / 'serve.log').read_text()}")
            time.sleep(0.2)
        yield base, db
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _token(page: str) -> str:
    """The CSRF token of a page, as htmx reads it from <body hx-headers>."""
    start = page.index("hx-headers='") + len("hx-headers='")
    return json.loads(page[start : page.index("'", start)].replace("&#34;", '"'))["X-CSRF-Token"]


# ---------------------------------------------------------------- slow bodies


def slow(folder: Path) -> dict:
    with served(folder) as (base, _db):
        port = int(base.rsplit(":", 1)[1])
        pages = httpx2.get(f"{base}/offline/pages").json()["pages"]
        target = next(p for p in pages if "/exercises/" in p) + "/draft"
        sockets = []
        for _ in range(SLOW_CONNECTIONS):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(
                f"PUT {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: 4096\r\n\r\n".encode()
            )
            sockets.append(s)
        stop = threading.Event()

        def trickle() -> None:
            while not stop.wait(BYTE_EVERY):
                for s in sockets:
                    with suppress(OSError):
                        s.sendall(b" ")

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(1.0)  # every slow connection is in
        answers = []
        with httpx2.Client(base_url=base, timeout=30) as learner:
            for _ in range(10):
                started = time.monotonic()
                status = learner.get("/").status_code
                answers.append((status, time.monotonic() - started))
                time.sleep(0.5)
        stop.set()
        cut = []
        for s in sockets:  # what each slow connection was answered, if anything yet
            s.settimeout(0.2)
            try:
                cut.append(s.recv(64).split(b"\r\n", 1)[0].decode() or "closed")
            except OSError:
                cut.append("no answer yet")
            s.close()
    seconds = [t for _, t in answers]
    return {
        "GET / statuses": sorted({s for s, _ in answers}),
        "GET / seconds, median": round(statistics.median(seconds), 3),
        "GET / seconds, slowest": round(max(seconds), 3),
        "slow connections were answered": sorted(set(cut)),
    }


# ---------------------------------------------------------------- free storage


def _size(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def storage(folder: Path) -> dict:
    with served(folder) as (base, db):
        pages = httpx2.get(f"{base}/offline/pages").json()["pages"]
        exercises = [p for p in pages if "/exercises/" in p]
        httpx2.get(f"{base}/{exercises[0]}")  # the first page's own rows, if any
        before = _size(db)
        code = ("# padding" * (DRAFT_BYTES // 9 + 1))[: DRAFT_BYTES - 1] + "\n"
        statuses: dict[int, int] = {}
        started = time.monotonic()
        for _ in range(VISITORS):
            with httpx2.Client(base_url=base, timeout=30) as visitor:  # a fresh cookie jar
                token = _token(visitor.get(exercises[0]).text)
                for page in exercises:
                    status = visitor.put(
                        f"{page}/draft", json={"code": code}, headers={"X-CSRF-Token": token}
                    ).status_code
                    statuses[status] = statuses.get(status, 0) + 1
        took = time.monotonic() - started
        after = _size(db)
    return {
        "drafts sent": VISITORS * len(exercises),
        "answers": dict(sorted(statuses.items())),
        "seconds": round(took, 2),
        "database growth, MB": round((after - before) / 1e6, 2),
    }


# ---------------------------------------------------------------- the tutor's budget


def tutor(folder: Path) -> dict:
    from tests.tutor.conftest import FakeEndpoint

    model = FakeEndpoint()
    model.script.pieces = ["word "] * 100
    model.script.usage = {"prompt_tokens": 400, "completion_tokens": 100}
    model.start()
    env = {
        "TREINO_TUTOR_URL": model.url,
        "TREINO_TUTOR_MODEL": "fake",
        "TREINO_TUTOR_TOKENS_PER_HOUR": str(TOKEN_BUDGET),
    }
    try:
        with served(folder, **env) as (base, db), httpx2.Client(base_url=base, timeout=60) as learner:
            pages = httpx2.get(f"{base}/offline/pages").json()["pages"]
            exercise = next(p for p in pages if "/exercises/" in p)
            token = _token(learner.get(exercise).text)
            asked = [
                learner.post(
                    f"{exercise}/tutor",
                    json={"question": f"Why does my loop fail? ({n})", "code": ""},
                    headers={"X-CSRF-Token": token},
                )
                for n in range(QUESTIONS)
            ]
            for reply in asked:
                if reply.status_code == 202:
                    learner.get(reply.json()["stream"]).raise_for_status()
            with sqlite3.connect(db) as connection:
                columns = {row[1] for row in connection.execute("PRAGMA table_info(tutor_messages)")}
                reserved = " + reserved_tokens" if "reserved_tokens" in columns else ""
                charged = connection.execute(
                    f"SELECT coalesce(sum(prompt_tokens + completion_tokens{reserved}), 0) "
                    "FROM tutor_messages WHERE role = 'tutor'"
                ).fetchone()[0]
    finally:
        model.stop()
    return {
        "questions asked": QUESTIONS,
        "accepted": sum(r.status_code == 202 for r in asked),
        "tokens charged": charged,
        "budget": TOKEN_BUDGET,
    }


ATTACKS = {"slow": slow, "storage": storage, "tutor": tutor}


def main(argv: list[str]) -> int:
    chosen = argv or list(ATTACKS)
    for name in chosen:
        with tempfile.TemporaryDirectory(prefix=f"treino-hostile-{name}-") as tmp:
            print(name, json.dumps(ATTACKS[name](Path(tmp)), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
