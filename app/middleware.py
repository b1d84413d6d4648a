"""ASGI middleware at the door: security headers on every response, and a request's whole body
read in time before it waits for a place (app/capacity.py's gate, inside this). Who is asking
is set innermost, by app/context.py.

Pure ASGI rather than BaseHTTPMiddleware, so the language context variable reaches the route.
"""

import asyncio

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import i18n
from app.errors import error_response
from app.security import security_headers
from app.web import choose_lang


class SecurityHeaders:
    """CSP, nosniff, Referrer-Policy, no framing (and HSTS over HTTPS) on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = security_headers(scope["path"], scope.get("scheme") == "https")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in extra.items():
                    headers[key] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class Body:
    """Read a request's whole body before anything inside sees it, so that no capacity place,
    thread or connection waits on a client's upload (app/capacity.py's gate is inside this): it
    must arrive within `seconds` (else 408, and the connection closes) and hold at most `limit`
    bytes, whether or not Content-Length is sent (else 413). A client that trickles a body, a
    byte every few seconds, holds a socket and a few kilobytes here, never a place (issue 43).
    What is inside reads the body as it was sent, in one message."""

    def __init__(self, app: ASGIApp, *, limit: int, seconds: float) -> None:
        self.app = app
        self.limit = limit
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        declared = Request(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await _refuse(scope, receive, send, 413)
            return
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.seconds):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return  # the client went: nobody to answer
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        await _refuse(scope, receive, send, 413)
                        return
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
        except TimeoutError:
            await _refuse(scope, receive, send, 408)
            return
        body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal body
            if body is None:
                return await receive()  # after the body: the disconnect, when it comes
            message, body = body, None
            return message

        await self.app(scope, replay, send)


def _has_body(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    return "transfer-encoding" in headers or headers.get("content-length", "0") not in ("", "0")


def early_request(scope: Scope, receive: Receive) -> Request:
    """A request answered before RequestContext ran (refused at the door): its language from
    ?lang=, the cookie or Accept-Language; no account lookup, which would wait for a place too."""
    request = Request(scope, receive)
    request.state.lang = lang = choose_lang(request)[0]
    i18n.set_lang(lang)
    return request


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int) -> None:
    """An error page or JSON in the visitor's language, and the connection closed: what is
    left of the body is never read."""
    request = early_request(scope, receive)
    response = error_response(request, status)
    response.headers["Connection"] = "close"
    response.headers["Content-Language"] = request.state.lang
    await response(scope, receive, send)
