"""Who is asking, and in which language: the visitor's cookie, the account's credentials, the
request's id, language and CSRF token, set for the route (``RequestContext``, the innermost
middleware: inside the door, app/middleware.py, and the gate, app/capacity.py, so that a request
goes through each module once on its way in).

Pure ASGI rather than BaseHTTPMiddleware, so the language context variable reaches the route.
"""

import hashlib
import hmac
import secrets
from base64 import urlsafe_b64encode
from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import i18n, logs
from app.security import csrf_token
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
