"""Every error as a page in the visitor's language, or as one documented JSON shape (ErrorOut)
for the API and the operations endpoints: never a bare 500, never HTML where JSON is promised."""

import logging
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.http import is_api, is_htmx, redirect
from app.i18n import gettext as _
from app.security import SAFE_METHODS, security_headers
from app.web import render

log = logging.getLogger(__name__)

# Paths answered in JSON (errors too): the API, and what machines scrape and probe.
MACHINE_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})

CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "too_large",
    422: "invalid_input",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="Where: `body`, `query` or `path`, then the field")
    message: str = Field(description="What is wrong with it, in the request's language")
    type: str = Field(
        description="The kind of error, e.g. `missing`, `string_too_long`, "
        "`string_pattern_mismatch` (a NUL), `string_unicode` (a lone "
        "surrogate), `less_than_equal` (a number too large)"
    )


class ErrorOut(BaseModel):
    """The body of every API error."""

    code: str = Field(
        description="Machine-readable, stable: "
        + ", ".join(
            f"`{c}`"
            for c in sorted(
                {
                    *CODES.values(),
                    "email_taken",
                    "wrong_credentials",
                    "token_invalid",
                    "already_active",
                    "throttled",
                    "busy",
                }
            )
        ),
        examples=["not_found"],
    )
    message: str = Field(description="For people, in the request's language")
    detail: list[FieldError] | None = Field(
        default=None, description="`invalid_input` only: each field that was refused"
    )


class ApiError(HTTPException):
    """An HTTPException with its own machine-readable `code` (else the status's, from CODES)."""

    def __init__(
        self,
        status_code: int,
        message: str | None = None,
        *,
        code: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status_code, message, headers)
        self.code = code


def too_many(message: str, retry_after: int) -> ApiError:
    """429 `throttled`, with the seconds to wait in Retry-After."""
    return ApiError(429, message, code="throttled", headers={"Retry-After": str(retry_after)})


_DESCRIPTIONS = {
    400: "The body could not be read (not UTF-8, or not what its Content-Type says)",
    401: "No valid credentials (or a revoked token)",
    403: "Refused: a cross-site request, or a cookie-signed call without its CSRF token",
    404: "Not found, or not yours",
    408: "The request body did not arrive in time (TREINO_BODY_SECONDS); send it again",
    409: "Conflict with what is stored",
    413: "The request body is larger than the server accepts",
    422: "Invalid input",
    429: "Too many requests; see Retry-After",
    503: "`busy`: the tutor is serving as many requests as it can; send again after Retry-After",
}


def documented(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: each status with the ErrorOut body (descriptions by `s401=`)."""
    return {
        status: {"model": ErrorOut, "description": descriptions.get(f"s{status}", _DESCRIPTIONS[status])}
        for status in statuses
    }


def _titles() -> dict[int, tuple[str, str]]:
    return {
        400: (_("Bad request"), _("The request could not be understood.")),
        401: (_("Sign-in needed"), _("Sign in to see this.")),
        403: (_("Not allowed"), _("This request was refused.")),
        404: (_("Page not found"), _("There is nothing at this address. The lessons are listed below.")),
        405: (_("Method not allowed"), _("This address does not accept that kind of request.")),
        408: (_("Too slow"), _("What you sent took too long to arrive. Please send it again.")),
        413: (_("Too large"), _("What you sent is larger than the server accepts.")),
        422: (_("Invalid input"), _("Some of what you sent is missing or not valid.")),
        429: (_("Too many requests"), _("Please wait a little and try again.")),
        500: (_("Something went wrong"), _("An unexpected error happened on our side. Please try again.")),
        503: (
            _("The tutor is busy"),
            _("Many learners are using it at this moment. Try again in a few seconds."),
        ),
    }


class Redirect(Exception):
    """Raised where a page cannot be shown as asked (e.g. it needs a sign-in): go to `url`."""

    def __init__(self, url: str) -> None:
        self.url = url


def _invalid_message(error: ErrorDetails) -> str:
    """A validation error in the visitor's language, naming the field."""
    where = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path"))
    kind = error.get("type", "")
    if kind == "json_invalid":
        return _("The request body is not valid JSON.")
    if kind == "missing":
        message = _("this is required.")
    elif kind in ("string_pattern_mismatch", "string_unicode"):
        # the only pattern on text fields: no NUL; string_unicode: a lone surrogate (\ud800)
        message = _("this contains a character that is not text (a NUL or a lone surrogate).")
    elif kind in ("less_than_equal", "less_than"):
        message = _("this number is too large.")
    elif kind.endswith("_type") or kind.endswith("_parsing"):
        message = _("this has the wrong type.")
    elif kind == "string_too_long":
        message = _("this is too long.")
    else:
        message = _("this is not valid.")
    return f"{where}: {message}" if where else message


def wants_json(request: Request) -> bool:
    path = request.url.path
    return is_api(path) or path in MACHINE_PATHS


def error_response(
    request: Request,
    status: int,
    detail: str | None = None,
    *,
    code: str | None = None,
    fields: list[ErrorDetails] | None = None,
) -> Response:
    if wants_json(request):
        body = ErrorOut(
            code=code or CODES.get(status, CODES[400 if status < 500 else 500]),
            message=detail or _reason(status),
            detail=[
                FieldError(
                    loc=[str(p) if not isinstance(p, int) else p for p in e.get("loc", ())],
                    message=_invalid_message(e),
                    type=e.get("type", ""),
                )
                for e in fields
            ]
            if fields is not None
            else None,
        )
        return JSONResponse(body.model_dump(), status_code=status)
    title, message = _titles().get(status, _titles()[400 if status < 500 else 500])
    if not hasattr(request.state, "lang"):
        request.state.lang = "en"
    message = detail or message
    if request.method not in SAFE_METHODS:
        # a refused or failed request rolled back: say so, so the learner knows to send it again
        message = " ".join((message, _("Nothing you sent was stored.")))
    context = {
        "status": status,
        "title": title,
        "message": message,
        "course": getattr(request.app.state, "course", None),
    }
    return render(request, "error.html", context, status_code=status)


def busy_response(request: Request, retry_after: int) -> Response:
    """503 `busy` with Retry-After, for a web process at capacity (app/capacity.py). To the
    editor's htmx Submit it is the status fragment saying so; the editor keeps the code."""
    if is_htmx(request) and not wants_json(request):
        message = _(
            "The tutor is busy: many learners pressed Submit at once. Your code is still here; "
            "send it again in a few seconds."
        )
        context = {
            "submission": None,
            "error": message,
            "announce": True,
            "history_oob": None,
            "attempts": None,
        }
        response = render(request, "_submission_status.html", context, status_code=503)
    else:
        response = error_response(request, 503, code="busy")
    response.headers["Retry-After"] = str(retry_after)
    response.headers["Content-Language"] = request.state.lang
    return response


def install(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        given = exc.detail if isinstance(exc.detail, str) else None
        detail = given if given != _reason(exc.status_code) else None
        response = error_response(request, exc.status_code, detail, code=getattr(exc, "code", None))
        response.headers.update(exc.headers or {})  # WWW-Authenticate, Retry-After, Allow
        if exc.status_code == 405:  # every method of the path, not only the first route's
            response.headers["Allow"] = ", ".join(sorted(_allowed(request.scope)))
        return response

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = list(exc.errors())
        return error_response(request, 422, _invalid_message(errors[0]) if errors else None, fields=errors)

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


def leaf_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes themselves: FastAPI wraps each included router (all included without a prefix)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is None:
            yield route
        else:
            yield from leaf_routes(inner.routes)


def _allowed(scope: Scope) -> set[str]:
    methods: set[str] = set()
    for route in leaf_routes(scope["app"].router.routes):
        if route.matches(scope)[0] != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return methods


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""
