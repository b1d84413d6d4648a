"""The web application: built by create_app(), never at import."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from sqlalchemy.orm import sessionmaker

from app import errors
from app.accounts import routes as accounts
from app.config import ROOT, Settings, get_settings
from app.db import make_engine
from app.drafts import routes as drafts
from app.lessons import routes as lessons
from app.lessons.content import Course, load_course
from app.middleware import BodyLimit, RequestContext, SecurityHeaders
from app.ops import routes as ops
from app.progress import routes as progress
from app.quizzes import routes as quizzes
from app.security import verify_csrf
from app.submissions import routes as submissions
from app.web import templates


def create_app(settings: Settings | None = None, *, course: Course | None = None) -> FastAPI:
    settings = settings or get_settings()
    course = course or load_course(settings.lessons_dir)  # a broken lesson stops start-up here
    engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
    # GET and HEAD change nothing: their sessions read in autocommit, without BEGIN and COMMIT
    # round trips; a pool of their own, so that no connection switches modes at every request
    reader = make_engine(settings.database_url, isolation_level="AUTOCOMMIT",
                         pool_size=settings.db_pool_size)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()
        reader.dispose()

    app = FastAPI(title="treino", summary="A tutor for efficient PyTorch training on small GPUs",
                  version="0.1.0", lifespan=lifespan, redoc_url=None,  # /docs is the one API page
                  dependencies=[Depends(verify_csrf)])
    app.state.settings = settings
    templates.env.auto_reload = settings.reload_lessons  # else each page stats its templates
    app.state.course = course
    app.state.sessionmaker = sessionmaker(engine, expire_on_commit=False)
    app.state.reader = sessionmaker(reader, expire_on_commit=False)
    app.mount("/static", StaticFiles(directory=ROOT / "static"), name="static")
    app.include_router(lessons.router)
    app.include_router(quizzes.router)
    app.include_router(accounts.router)
    app.include_router(progress.router)
    app.include_router(submissions.router)
    app.include_router(drafts.router)
    app.include_router(ops.router)
    errors.install(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestContext)  # every response, errors too, has a language
    app.add_middleware(SecurityHeaders)  # outermost: on every response
    return app
