"""A fake OpenAI-compatible endpoint on a free loopback port (a real HTTP server: the app's own
client talks to it), scripted per test: what it streams, how slowly, or a refusal. It records
every request body, so tests can read the grounding that was sent."""

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from app.config import Settings
from app.main import create_app
from app.tutor import client as tutor_client
from tests.conftest import LESSONS, arm_csrf


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Script:
    pieces: list[str] = field(default_factory=lambda: ["Look at ", "how the loss ", "is scaled."])
    first_delay: float = 0.0
    delay: float = 0.0
    status: int = 200
    usage: dict[str, int] | None = None
    finish_reason: str = "stop"  # "length": the answer was cut at max_tokens
    requests: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: list[bool] = field(default_factory=list)


class FakeEndpoint:
    def __init__(self) -> None:
        self.script = Script()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"

        async def models(_request: Request):
            return JSONResponse({"data": [{"id": "fake"}]})

        async def chat(request: Request):
            body = await request.json()
            script = self.script
            script.requests.append(body)
            if script.status != 200:
                return JSONResponse({"error": "no"}, status_code=script.status)

            async def events():
                sent = 0
                try:
                    await asyncio.sleep(script.first_delay)
                    for piece in script.pieces:
                        chunk = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                        yield f"data: {json.dumps(chunk)}\n\n"
                        sent += 1
                        await asyncio.sleep(script.delay)
                    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": script.finish_reason}]}
                    yield f"data: {json.dumps(end)}\n\n"
                    if script.usage:
                        yield f"data: {json.dumps({'choices': [], 'usage': script.usage})}\n\n"
                    yield "data: [DONE]\n\n"
                finally:
                    script.stopped_early.append(sent < len(script.pieces))

            return StreamingResponse(events(), media_type="text/event-stream")

        app = Starlette(
            routes=[Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"])]
        )
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> "FakeEndpoint":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    fake = FakeEndpoint().start()
    tutor_client.forget_probes()
    yield fake
    fake.stop()
    tutor_client.forget_probes()


def tutor_settings(database_url: str, url: str | None, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        lessons_dir=LESSONS,
        tutor_url=url,
        _env_file=None,
        **{"tutor_model": "fake", **extra},
    )


@pytest.fixture
def make_client(sqlite_url, _course):
    """``make_client(url, **settings)``: a test client of an app whose tutor is at `url`."""
    clients = []

    def make(url: str | None, **extra: Any) -> TestClient:
        app = create_app(tutor_settings(sqlite_url, url, **extra), course=_course)
        c = TestClient(app)
        c.__enter__()
        clients.append(c)
        return arm_csrf(c)

    yield make
    for c in clients:
        c.__exit__(None, None, None)
