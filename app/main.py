"""The web application: built by create_app(), never at import."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import sessionmaker
from starlette.middleware.trustedhost import TrustedHostMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import errors
from app import models as _every_table  # noqa: F401  (adoption, export and deletion walk them all)
from app.accounts import auth
from app.accounts import routes as accounts
from app.capacity import UNGATED, Gate, Sizes, use_threads
from app.classes import routes as classes
from app.config import ROOT, Settings, get_settings
from app.context import RequestContext
from app.db import make_engine
from app.drafts import routes as drafts
from app.http import is_api
from app.lessons import routes as lessons
from app.lessons.course import Course, load_course
from app.middleware import Body, SecurityHeaders
from app.offline import routes as offline
from app.ops import routes as ops
from app.progress import routes as progress
from app.security import SAFE_METHODS, verify_csrf
from app.submissions import routes as submissions
from app.tutor import routes as tutor
from app.web import templates


def create_app(settings: Settings | None = None, *, course: Course | None = None) -> FastAPI:
    settings = settings or get_settings()
    course = course or load_course(settings.lessons_dir)  # a broken lesson stops start-up here
    sizes = Sizes(settings.web_concurrency)
    # no overflow: the gate lets in no more requests than a pool has connections
    pooled = {"pool_size": sizes.connections, "max_overflow": 0}
    engine = make_engine(settings.database_url, **pooled)
    # GET and HEAD change nothing: their sessions read in autocommit, without BEGIN and COMMIT
    # round trips; a pool of their own, so that no connection switches modes at every request
    reader = make_engine(settings.database_url, isolation_level="AUTOCOMMIT", **pooled)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        use_threads(sizes)
        yield
        engine.dispose()
        reader.dispose()

    app = FastAPI(
        title="treino",
        summary="A tutor for efficient PyTorch training on small GPUs",
        version="0.1.0",
        lifespan=lifespan,
        redoc_url=None,  # /docs is the one API page
        dependencies=[Depends(verify_csrf)],
        generate_unique_id_function=lambda route: route.name,
    )  # operationId: the function
    app.state.settings = settings
    templates.env.auto_reload = settings.reload_lessons  # else each page stats its templates
    app.state.course = course
    app.state.sessionmaker = sessionmaker(engine, expire_on_commit=False)
    app.state.reader = sessionmaker(reader, expire_on_commit=False)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    app.include_router(lessons.router)
    app.include_router(accounts.router)
    app.include_router(progress.router)
    app.include_router(submissions.router)
    app.include_router(drafts.router)
    app.include_router(ops.router)
    app.include_router(tutor.router)
    app.include_router(offline.router)
    app.include_router(classes.router)
    errors.install(app)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # every response, errors too, has a language
    app.add_middleware(RequestContext, authenticate=auth.authenticate_request, ended=auth.session_ended)
    app.add_middleware(Gate, sizes=sizes)  # before anything that needs a thread or a connection
    # a body is read whole, in time, before its request waits for a place (issue 43)
    app.add_middleware(Body, limit=settings.max_body_bytes, seconds=settings.request_seconds)
    # a request for a host that is not this tutor's is refused (400): nothing can be made to
    # point elsewhere by a Host header; X-Forwarded-For/-Proto are believed from the proxies named
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts(), www_redirect=False)
    if settings.forwarded_allow_ips:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
    app.add_middleware(SecurityHeaders)  # outermost: on every response
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document, plus the errors every operation can answer, all in ErrorOut's shape:
    413 (the body limit, before any route), 408 (a body that did not arrive in time) and 422
    wherever there is input, 401 anywhere under
    /api (a revoked token), 403 for unsafe /api calls (one from another site), 503 `busy`
    wherever the gate answers (app/capacity.py)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}}
    extra = errors.documented(400, 401, 403, 408, 413, 422, 503)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            wanted = [413]
            if not path.startswith(UNGATED) and "503" not in operation["responses"]:
                wanted.append(503)
            if "422" in operation["responses"] or "requestBody" in operation:
                wanted.append(422)
            if "requestBody" in operation:
                wanted.extend((400, 408))
            if is_api(path):
                wanted.append(401)
                if method.upper() not in SAFE_METHODS:
                    wanted.append(403)
            for status in wanted:
                given = operation["responses"].get(str(status), {})
                operation["responses"][str(status)] = {
                    "description": given.get("description", extra[status]["description"]),
                    **error,
                }
            for status, response in operation["responses"].items():
                if status[0] in "45" and "ErrorOut" in str(response.get("content")):
                    response.update(error)  # JSON whatever the route's own answers are
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)
    app.openapi_schema = schema
    return schema
