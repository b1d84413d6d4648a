"""ASGI middleware: the request context (who, which language), security headers, the body.

Pure ASGI rather than BaseHTTPMiddleware, so the language context variable reaches the route.
"""

import asyncio
import hashlib
import hmac
import secrets
from base64 import urlsafe_b64encode
from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import i18n, logs
from app.errors import error_response
from app.security import csrf_token, security_headers
from app.web import LANG_COOKIE, choose_lang

VISITOR_COOKIE = "treino_visitor"
YEAR = 365 * 24 * 3600


def visitor_cookie(secure: bool) -> str:
    """`__Host-` over HTTPS, like the session cookie: no subdomain or plain-HTTP page can plant one."""
    return f"__Host-{VISITOR_COOKIE}" if secure else VISITOR_COOKIE


def _visitor_mac(secret: str, nonce: str) -> str:
    digest = hmac.new(secret.encode(), f"visitor:{nonce}".encode(), hashlib.sha256).digest()
    return urlsafe_b64encode(digest[:16]).decode().rstrip("=")


def new_visitor_id(secret: str) -> str:
    """A visitor id only this server can make: a random nonce and its MAC (54 characters)."""
    nonce = secrets.token_urlsafe(24)
    return f"{nonce}.{_visitor_mac(secret, nonce)}"


def valid_visitor_id(secret: str, value: str) -> bool:
    nonce, _sep, mac = value.partition(".")
    return len(nonce) == 32 and hmac.compare_digest(mac.encode(), _visitor_mac(secret, nonce).encode())


def rotate_visitor(request: Request) -> None:
    """A new visitor id for this browser from this response on (sign-up, sign-in): whoever knew
    the old one, e.g. by planting it, is not this learner."""
    request.state.visitor_id = new_visitor_id(request.app.state.settings.secret_key.get_secret_value())
    request.state.new_visitor = True


class Credentials(Protocol):
    """What RequestContext needs of what a request's credentials came to (app/accounts makes it;
    routes read the rest from request.state.auth)."""

    @property
    def expired(self) -> bool:
        """A session or token was sent that is no longer valid."""

    @property
    def lang(self) -> str | None:
        """The signed-in account's language."""

    @property
    def csrf_identity(self) -> str | None:
        """What the CSRF token is bound to while signed in; None: the visitor."""


class RequestContext:
    """Sets request.state.auth (what `authenticate` made of the credentials), .visitor_id, .lang
    and .csrf_token, and the cookies behind them. A session or token that is no longer valid
    never reaches a route: `ended` answers instead (main.py passes both, from app/accounts)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Callable[[Request], Awaitable[Credentials]],
        ended: Callable[[Request], Response],
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.ended = ended

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        secure = scope.get("scheme") == "https"
        auth = await self.authenticate(request)
        # no such operation: the router's 404 or 405 says more than a 401
        ended = auth.expired and _routed(scope)
        lang, remember = choose_lang(request, auth.lang)
        secret = request.app.state.settings.secret_key.get_secret_value()
        # issued by this server only: a value it did not sign is replaced, never adopted
        visitor = request.cookies.get(visitor_cookie(secure), "")
        new_visitor = not valid_visitor_id(secret, visitor)
        if new_visitor:
            visitor = new_visitor_id(secret)
        identity = auth.csrf_identity or f"visitor:{visitor}"
        scope.setdefault("state", {})
        request_id = logs.new_request_id(request.headers.get("x-request-id"))
        scope["state"].update(
            lang=lang,
            visitor_id=visitor,
            new_visitor=new_visitor,
            auth=auth,
            request_id=request_id,
            csrf_token=csrf_token(secret, identity),
        )
        i18n.set_lang(lang)

        async def send_with_cookies(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                cookie = Response()
                if remember:
                    cookie.set_cookie(LANG_COOKIE, lang, max_age=YEAR, samesite="lax", secure=secure)
                state = scope["state"]
                if state["new_visitor"] and state["visitor_id"]:
                    cookie.set_cookie(
                        visitor_cookie(secure),
                        state["visitor_id"],
                        max_age=YEAR,
                        httponly=True,
                        samesite="lax",
                        secure=secure,
                    )
                for key, value in cookie.raw_headers:
                    if key == b"set-cookie":
                        headers.append("set-cookie", value.decode("latin-1"))
                headers.append("Content-Language", lang)
                headers.append("X-Request-ID", request_id)
            await send(message)

        if ended:
            await self.ended(request)(scope, receive, send_with_cookies)
            return
        await self.app(scope, receive, send_with_cookies)


def _routed(scope: Scope) -> bool:
    """Whether a route takes this path with this method."""
    return any(route.matches(scope)[0] == Match.FULL for route in scope["app"].router.routes)


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
