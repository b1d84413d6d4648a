"""Every error as a page in the visitor's language (JSON under /api): never a bare 500."""

import logging
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.i18n import gettext as _
from app.web import render

log = logging.getLogger(__name__)


def _titles() -> dict[int, tuple[str, str]]:
    return {
        400: (_("Bad request"), _("The request could not be understood.")),
        404: (_("Page not found"), _("There is nothing at this address. The lessons are listed below.")),
        405: (_("Method not allowed"), _("This address does not accept that kind of request.")),
        413: (_("Too large"), _("What you sent is larger than the server accepts.")),
        422: (_("Invalid input"), _("Some of what you sent is missing or not valid.")),
        500: (_("Something went wrong"), _("An unexpected error happened on our side. Nothing you "
                                           "sent was lost; please try again.")),
    }


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
        return error_response(request, exc.status_code, detail)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        detail = f"{where}: {first.get('msg', '')}" if where else None
        return error_response(request, 422, detail)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, 500)


def _reason(exc: HTTPException) -> str:
    try:
        return HTTPStatus(exc.status_code).phrase
    except ValueError:
        return ""
