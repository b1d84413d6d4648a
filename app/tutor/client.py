"""The tutor's one connection to the world: an OpenAI-compatible /v1/chat/completions, streamed
(server-sent events), over httpx2, the project's HTTP client. Nothing else is ever sent."""

import json
import threading
import time
from collections.abc import AsyncGenerator
from contextlib import AbstractContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx2

from app.config import Settings

PROBE_SECONDS = 2.0
PROBE_KEEP = 15.0  # seconds a reachability answer is reused (/readyz, /metrics)


class Unavailable(Exception):
    """The endpoint is down (`down`), too slow (`slow`) or refused the request (`refused`)."""

    def __init__(self, kind: Literal["down", "slow", "refused"], detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # why the model stopped, as the server said ("stop", "length": cut at max_tokens…), if it did
    finish_reason: str | None = None


def base_url(settings: Settings) -> str:
    """The endpoint's /v1 base: TREINO_TUTOR_URL with /v1 added unless it ends with it."""
    url = (settings.tutor_url or "").rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _headers(settings: Settings) -> dict[str, str]:
    key = settings.tutor_api_key.get_secret_value() if settings.tutor_api_key else ""
    return {"Authorization": f"Bearer {key}"} if key else {}


async def chat(
    settings: Settings,
    messages: list[dict[str, str]],
    usage: Usage,
    *,
    max_tokens: int | None = None,
    deadline: float | None = None,
) -> AsyncGenerator[str, None]:
    """The answer's text as it is written. Fills `usage` (the server's count when it gives one,
    else one token per streamed piece). Raises Unavailable, "slow" at `deadline` (a
    time.monotonic() time; TUTOR_TIMEOUT_SECONDS from now without one) whatever it is waiting
    for then; the caller closes the iterator to stop the generation (the connection closes and
    the server stops)."""
    timeout = httpx2.Timeout(
        connect=min(5.0, settings.tutor_first_token_seconds),
        read=settings.tutor_first_token_seconds,
        write=10.0,
        pool=5.0,
    )
    body: dict[str, Any] = {
        "model": settings.tutor_model,
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens or settings.tutor_max_tokens,
        "temperature": 0.3,
    }
    if deadline is None:
        deadline = time.monotonic() + settings.tutor_timeout_seconds

    def in_time() -> AbstractContextManager[anyio.CancelScope]:
        # each wait on its own (never across a yield): the caller's time is not this scope's
        return anyio.fail_after(max(0.0, deadline - time.monotonic()))

    pieces = 0
    try:
        async with httpx2.AsyncClient(timeout=timeout) as client, AsyncExitStack() as stack:
            with in_time():
                response = await stack.enter_async_context(
                    client.stream(
                        "POST",
                        base_url(settings) + "/chat/completions",
                        json=body,
                        headers=_headers(settings),
                    )
                )
                if response.status_code != 200:
                    detail = (await response.aread())[:300].decode("utf-8", "replace")
                    raise Unavailable("refused", f"HTTP {response.status_code} {detail}")
            lines = response.aiter_lines()
            while True:
                with in_time():
                    line = await anext(lines, None)
                if line is None:
                    break
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                except ValueError:
                    continue
                if not isinstance(event, dict):
                    continue
                if isinstance(event.get("usage"), dict):
                    usage.prompt_tokens = int(event["usage"].get("prompt_tokens") or usage.prompt_tokens)
                    usage.completion_tokens = int(
                        event["usage"].get("completion_tokens") or usage.completion_tokens
                    )
                for choice in event.get("choices") or []:
                    if isinstance(reason := (choice or {}).get("finish_reason"), str):
                        usage.finish_reason = reason
                    text = ((choice or {}).get("delta") or {}).get("content")
                    if isinstance(text, str) and text:
                        pieces += 1
                        usage.completion_tokens = max(usage.completion_tokens, pieces)
                        yield text
    except TimeoutError as e:
        raise Unavailable("slow", f"no end after {settings.tutor_timeout_seconds:g} s") from e
    except httpx2.TimeoutException as e:
        raise Unavailable("slow", type(e).__name__) from e
    except httpx2.HTTPError as e:
        raise Unavailable("down", f"{type(e).__name__}: {e}") from e


_probe_lock = threading.Lock()
_probed: dict[str, tuple[float, bool]] = {}


def reachable(settings: Settings) -> bool | None:
    """Whether the endpoint answers (GET /v1/models), None when no tutor is configured; the
    answer is kept PROBE_KEEP seconds. Synchronous: /readyz and /metrics run in threads."""
    if not settings.tutor_url:
        return None
    url = base_url(settings) + "/models"
    with _probe_lock:
        hit = _probed.get(url)
        if hit and time.monotonic() - hit[0] < PROBE_KEEP:
            return hit[1]
    try:
        with httpx2.Client(timeout=PROBE_SECONDS) as client:
            ok = client.get(url, headers=_headers(settings)).status_code < 500
    except httpx2.HTTPError:
        ok = False
    with _probe_lock:
        _probed[url] = (time.monotonic(), ok)
    return ok


def forget_probes() -> None:
    """Forget cached reachability (tests)."""
    with _probe_lock:
        _probed.clear()
