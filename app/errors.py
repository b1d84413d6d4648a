"""Every error as a page in the visitor's language (JSON under /api): never a bare 500."""

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.i18n import gettext as _
from app.security import security_headers
from app.web import redirect, render

log = logging.getLogger(__name__)


def _titles() -> dict[int, tuple[str, str]]:
    return {
        400: (_("Bad request"), _("The request could not be understood.")),
        401: (_("Sign-in needed"), _("Sign in to see this.")),
        403: (_("Not allowed"), _("This request was refused.")),
        404: (_("Page not found"), _("There is nothing at this address. The lessons are listed below.")),
        405: (_("Method not allowed"), _("This address does not accept that kind of request.")),
        413: (_("Too large"), _("What you sent is larger than the server accepts.")),
        422: (_("Invalid input"), _("Some of what you sent is missing or not valid.")),
        429: (_("Too many requests"), _("Please wait a little and try again.")),
        500: (_("Something went wrong"), _("An unexpected error happened on our side. Nothing you "
                                           "sent was lost; please try again.")),
    }


class Redirect(Exception):
    """Raised where a page cannot be shown as asked (e.g. it needs a sign-in): go to `url`."""

    def __init__(self, url: str) -> None:
        self.url = url


def _invalid_message(error: dict) -> str:
    """A validation error in the visitor's language, naming the field."""
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
    kind = error.get("type", "")
    if kind == "json_invalid":
        return _("The request body is not valid JSON.")
    if kind == "missing":
        message = _("this is required.")
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        message = _("this has the wrong type.")
    elif kind == "string_too_long":
        message = _("this is too long.")
    else:
        message = _("this is not valid.")
    return f"{where}: {message}" if where else message


def error_response(request: Request, status: int, detail: str | None = None) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"detail": detail or HTTPStatus(status).phrase}, status_code=status)
    title, message = _titles().get(status, _titles()[400 if status < 500 else 500])
    if not hasattr(request.state, "lang"):
        request.state.lang = "en"
    context = {"status": status, "title": title, "message": detail or message,
               "course": getattr(request.app.state, "course", None)}
    return render(request, "error.html", context, status_code=status)


def install(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) and exc.detail != _reason(exc) else None
        response = error_response(request, exc.status_code, detail)
        response.headers.update(exc.headers or {})  # WWW-Authenticate, Retry-After
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        return error_response(request, 422, _invalid_message(errors[0]) if errors else None)

    @app.exception_handler(Redirect)
    async def _redirect(request: Request, exc: Redirect) -> Response:
        return redirect(request, exc.url)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        response = error_response(request, 500)
        # Answered outside the middleware stack, so the security headers are added here.
        response.headers.update(security_headers(request.url.path, request.url.scheme == "https"))
        return response


def _reason(exc: HTTPException) -> str:
    try:
        return HTTPStatus(exc.status_code).phrase
    except ValueError:
        return ""
