"""ASGI middleware: the request context (language, visitor) and the body-size limit.

Pure ASGI rather than BaseHTTPMiddleware, so the language context variable reaches the route.
"""

import re
import secrets

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import i18n
from app.errors import error_response
from app.web import LANG_COOKIE, choose_lang

VISITOR_COOKIE = "treino_visitor"
YEAR = 365 * 24 * 3600
_VISITOR_ID = re.compile(r"^[A-Za-z0-9_-]{24,64}$")


class RequestContext:
    """Sets request.state.lang and .visitor_id, and the cookies behind them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        lang, remember = choose_lang(request)
        visitor = request.cookies.get(VISITOR_COOKIE, "")
        new_visitor = not _VISITOR_ID.match(visitor)
        if new_visitor:
            visitor = secrets.token_urlsafe(24)
        scope.setdefault("state", {})
        scope["state"]["lang"] = lang
        scope["state"]["visitor_id"] = visitor
        i18n.set_lang(lang)
        secure = scope.get("scheme") == "https"

        async def send_with_cookies(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                cookie = Response()
                if remember:
                    cookie.set_cookie(LANG_COOKIE, lang, max_age=YEAR, samesite="lax", secure=secure)
                if new_visitor:
                    cookie.set_cookie(VISITOR_COOKIE, visitor, max_age=YEAR, httponly=True,
                                      samesite="lax", secure=secure)
                for key, value in cookie.raw_headers:
                    if key == b"set-cookie":
                        headers.append("set-cookie", value.decode("latin-1"))
                headers.append("Content-Language", lang)
            await send(message)

        await self.app(scope, receive, send_with_cookies)


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, whether or not Content-Length is sent.

    A body that grows past the limit while streaming ends the reading (the app sees a
    disconnect) and whatever the app answers is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Request(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        received = 0
        too_large = False

        async def counting_receive() -> Message:
            nonlocal received, too_large
            if too_large:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    too_large = True
                    return {"type": "http.disconnect"}
            return message

        refused = False

        async def guarded_send(message: Message) -> None:
            nonlocal refused
            if too_large:
                if not refused:
                    refused = True
                    await self._refuse(scope, receive, send)
                return
            await send(message)

        await self.app(scope, counting_receive, guarded_send)
        if too_large and not refused:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(Request(scope, receive), 413)
        await response(scope, receive, send)
