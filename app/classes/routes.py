"""A teacher's view of a class, and a learner's way in and out of one: the pages, the CSV, the
wait that keeps the class page live, and the API. Anyone who does not teach a class gets 404 for
everything of it, as if it did not exist."""

import asyncio
import csv
import hashlib
import hmac
import io
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any

from anyio import CapacityLimiter, to_thread
from fastapi import APIRouter, FastAPI, Form, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from markupsafe import Markup, escape
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from app.accounts.auth import UserDep
from app.accounts.models import User
from app.accounts.ownership import Learner
from app.classes import service
from app.classes.models import Classroom, Role
from app.classes.schemas import (
    ClassCreated,
    ClassId,
    ClassIn,
    ClassReportOut,
    JoinedOut,
    JoinIn,
)
from app.db import SessionDep, aware, make_engine, utcnow
from app.errors import ApiError, documented
from app.http import is_htmx
from app.i18n import current_lang
from app.i18n import gettext as _
from app.lessons.course import Course
from app.lessons.dependencies import CourseDep
from app.progress.service import course_progress
from app.security import TEXT_PATTERN
from app.submissions.present import when
from app.web import render
from contracts.verdict import render as render_verdict

router = APIRouter()

FormText = Annotated[str, Form(pattern=TEXT_PATTERN)]


def _taught(session: Session, class_id: int, user: User) -> Classroom:
    classroom = service.taught(session, class_id, user)
    if classroom is None:
        raise HTTPException(404)
    return classroom


def _join_url(request: Request, code: str) -> str:
    return str(request.url_for("join_page", code=code))


# ---------------------------------------------------------------- pages


@router.get("/classes", response_class=HTMLResponse, include_in_schema=False)
def classes_page(request: Request, session: SessionDep, user: UserDep, joined: int = 0):
    """The classes this account teaches or is in, and a form to start one; after joining, the
    class just joined is named."""
    memberships = service.classes_of(session, user)
    just = next((c for c, _member in memberships if c.id == joined), None)
    return render(request, "classes/index.html", {"memberships": memberships, "errors": {}, "joined": just})


@router.post("/classes", response_class=HTMLResponse, include_in_schema=False)
def create_class(
    request: Request, session: SessionDep, user: UserDep, name: FormText = "", course: FormText = ""
):
    if not name.strip() or len(name) > 120 or len(course) > 120:
        errors = {"name": _("Give the class a name (up to 120 characters).")}
        context = {
            "memberships": service.classes_of(session, user),
            "errors": errors,
            "name": name,
            "joined": None,
        }
        return render(request, "classes/index.html", context, status_code=422)
    classroom = service.create(session, user, name, course)
    return RedirectResponse(request.url_for("class_page", class_id=classroom.id), status_code=303)


@router.get("/classes/join", response_class=HTMLResponse, include_in_schema=False)
def join_by_code(request: Request, code: str = ""):
    """A code typed in (the form on the classes page): its join page."""
    code = service.normal_code(code)
    if not code or len(code) > 40 or not code.isalnum():
        raise HTTPException(404)
    return RedirectResponse(request.url_for("join_page", code=code), status_code=303)


@router.get("/classes/join/{code}", response_class=HTMLResponse, include_in_schema=False)
def join_page(request: Request, code: str, session: SessionDep):
    """Before joining: the class, and plainly what its teachers will see. A visitor without an
    account is asked to make one first (what they did so far comes with them, as at any sign-up)."""
    opened = service.by_code(session, code)
    if opened is None:
        raise HTTPException(404)
    classroom, role = opened
    user = request.state.auth.user
    member = service.membership(session, classroom.id, user) if user else None
    context = {
        "classroom": classroom,
        "role": role,
        "code": code,
        "member": member,
        "teachers": [m.name for m in service.teachers(session, classroom.id)],
        "default_name": service.default_name(user) if user else "",
    }
    return render(request, "classes/join.html", context)


@router.post("/classes/join/{code}", response_class=HTMLResponse, include_in_schema=False)
def join_form(request: Request, code: str, session: SessionDep, user: UserDep, name: FormText = ""):
    try:
        classroom, member = service.join(session, user, code, name[: service.NAME_MAX])
    except service.NotFound:
        raise HTTPException(404) from None
    if member.role == Role.TEACHER:
        return RedirectResponse(request.url_for("class_page", class_id=classroom.id), status_code=303)
    return RedirectResponse(request.url_for("classes_page").include_query_params(joined=classroom.id), 303)


@router.post("/classes/{class_id}/leave", response_class=HTMLResponse, include_in_schema=False)
def leave_form(request: Request, class_id: ClassId, session: SessionDep, user: UserDep):
    try:
        if not service.leave(session, class_id, user):
            raise HTTPException(404)
    except service.LastTeacher:
        raise HTTPException(
            409, _("You are this class's only teacher: invite another before you leave.")
        ) from None
    return RedirectResponse(request.url_for("classes_page"), status_code=303)


@router.get("/classes/{class_id}", response_class=HTMLResponse, include_in_schema=False)
def class_page(request: Request, class_id: ClassId, session: SessionDep, user: UserDep, course: CourseDep):
    """The class's report; htmx asks for its live part again when the class's work changes."""
    classroom = _taught(session, class_id, user)
    context = _report_context(request, session, classroom, course)
    if is_htmx(request):
        return render(request, "classes/_report.html", context)
    context["teachers"] = service.teachers(session, classroom.id)
    context["join_url"] = _join_url(request, classroom.join_code)
    context["teacher_url"] = _join_url(request, classroom.teacher_code)
    return render(request, "classes/page.html", context)


def _report_context(
    request: Request, session: Session, classroom: Classroom, course: Course
) -> dict[str, Any]:
    stamp = service.stamp(session, classroom.id)  # before the report: a change meanwhile shows next time
    report = service.report(session, classroom, course)
    lang = request.state.lang
    return {
        "classroom": classroom,
        "course": course,
        "report": report,
        "mistakes": {
            exercise_id: [_mistake(m, lang) for m in row.mistakes]
            for exercise_id, row in report.exercises.items()
        },
        "grid": _grid(report, course),
        "wait_url": _wait_url(request, classroom.id, stamp),
        "ago": ago,
        "now": utcnow(),
    }


def _grid(report: service.Report, course: Course) -> list[tuple[service.LearnerRow, Markup]]:
    """Each learner with their row of cells, as HTML: a class is hundreds of rows of a dozen
    cells, and a cell is one of a few, so each is made once (its status in words for screen
    readers; the mark is drawn by static/css/classes.css) and the rows are joined from them."""
    labels = {service.PASSED: _("passed"), service.TRIED: _("tried"), service.NOT_STARTED: _("not started")}
    made: dict[tuple[str, int], str] = {}

    def cell(c: service.Cell) -> str:
        found = made.get((c.status, c.attempts))
        if found is None:
            attempts = c.attempts or ""
            found = made[(c.status, c.attempts)] = (
                f'<td class="{c.status}"><i>{escape(labels[c.status])}</i>{attempts}</td>'
            )
        return found

    ids = [exercise.id for exercise in course.exercises]
    return [(row, Markup("".join(cell(row.cells[i]) for i in ids))) for row in report.learners]


def ago(moment: datetime, now: datetime) -> str:
    """ "3 minutes ago", as present.when says it, for a grid of hundreds of learners: the time
    is taken to the minute (to the hour past an hour, to the day past a day), so each wording
    is made once per language, not once per learner (Babel takes a tenth of a millisecond)."""
    seconds = max(0, int((now - aware(moment)).total_seconds()))
    if seconds >= 45:  # under that, "just now"
        step = 60 if seconds < 3600 else 3600 if seconds < 86400 else 86400
        seconds -= seconds % step
    return _worded(seconds, current_lang())


@lru_cache(maxsize=1024)
def _worded(seconds: int, _lang: str) -> str:
    now = utcnow()
    return when(now - timedelta(seconds=seconds), now)


def _mistake(mistake: service.Mistake, lang: str) -> dict[str, Any]:
    """A named mistake: its title in the teacher's language, and one verdict as its learner read it."""
    named = {
        "id": mistake.id,
        "learners": mistake.learners,
        "title": mistake.id,
        "said": "",
        "said_lang": lang,
    }
    example = mistake.example
    if example is not None and example.verdict:
        named["title"] = (render_verdict(example.verdict, lang).get("diagnosis") or {}).get(
            "title", mistake.id
        )
        diagnosis = render_verdict(example.verdict, example.lang).get("diagnosis") or {}
        named["said"], named["said_lang"] = diagnosis.get("explanation", ""), example.lang
    return named


@router.get("/classes/{class_id}/export.csv", include_in_schema=False)
def export_class(request: Request, class_id: ClassId, session: SessionDep, user: UserDep, course: CourseDep):
    """The grid as CSV: one row per learner, status and attempts per exercise."""
    classroom = _taught(session, class_id, user)
    report = service.report(session, classroom, course)
    out = io.StringIO()
    writer = csv.writer(out)
    labels = {service.PASSED: _("passed"), service.TRIED: _("tried"), service.NOT_STARTED: _("not started")}
    header = [_("Learner"), _("Last activity")]
    status, attempts = _("status"), _("attempts")
    for exercise in course.exercises:
        header += [f"{exercise.id} ({status})", f"{exercise.id} ({attempts})"]
    writer.writerow(header)
    for row in report.learners:
        line = [_csv_safe(row.name), row.last.isoformat() if row.last else ""]
        for exercise in course.exercises:
            cell = row.cells[exercise.id]
            line += [labels[cell.status], str(cell.attempts)]
        writer.writerow(line)
    filename = f"class-{classroom.id}.csv"
    return Response(
        out.getvalue(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"', "Cache-Control": "no-store"},
    )


def _csv_safe(text: str) -> str:
    """A learner's own text, never read by a spreadsheet as a formula."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@router.get("/classes/{class_id}/learners/{user_id}", response_class=HTMLResponse, include_in_schema=False)
def learner_page(
    request: Request,
    class_id: ClassId,
    user_id: ClassId,
    session: SessionDep,
    user: UserDep,
    course: CourseDep,
):
    """One learner's progress and submissions (code and verdicts), read-only, for their teachers."""
    classroom = _taught(session, class_id, user)
    member = service.learner(session, classroom, user_id)
    if member is None:
        raise HTTPException(404)
    seen = session.get(User, member.user_id)
    assert seen is not None  # the membership's foreign key
    context = {
        "classroom": classroom,
        "member": member,
        "course": course,
        "progress": course_progress(session, Learner("", seen), course),
        "submissions": service.learner_submissions(session, member),
    }
    return render(request, "classes/learner.html", context)


@router.post("/classes/{class_id}/learners/{user_id}/remove", include_in_schema=False)
def remove_learner(request: Request, class_id: ClassId, user_id: ClassId, session: SessionDep, user: UserDep):
    classroom = _taught(session, class_id, user)
    service.remove(session, classroom, user_id)
    return RedirectResponse(request.url_for("class_page", class_id=classroom.id), status_code=303)


@router.post("/classes/{class_id}/codes", include_in_schema=False)
def renew_codes(request: Request, class_id: ClassId, session: SessionDep, user: UserDep):
    """New invitation links; the old ones stop working, members stay."""
    classroom = _taught(session, class_id, user)
    service.renew_codes(session, classroom)
    return RedirectResponse(str(request.url_for("class_page", class_id=classroom.id)) + "#invite", 303)


# ---------------------------------------------------------------- live


CLASS_WAIT_SECONDS = 20.0  # unanswered this long, the page asks for the report anyway
CLASS_TICK_SECONDS = 1.0


def wait_key(request: Request, class_id: int) -> str:
    """The proof, in a wait URL, that a teacher's page showed this class: waiting needs no
    account lookup (as app/submissions/watch.py's key for a submission)."""
    secret = request.app.state.settings.secret_key.get_secret_value().encode()
    return hmac.new(secret, f"class:{class_id}".encode(), hashlib.sha256).hexdigest()[:32]


def _wait_url(request: Request, class_id: int, stamp: str) -> str:
    path = request.app.url_path_for("class_changes", class_id=class_id)
    return f"{path}?seen={stamp}&key={wait_key(request, class_id)}"


@router.get("/live/classes/{class_id}", include_in_schema=False)
async def class_changes(request: Request, class_id: ClassId, seen: str, key: str) -> Response:
    """Answers (204) once the class's work is no longer what the page showed (service.stamp), or
    after CLASS_WAIT_SECONDS; then the page fetches its report (static/js/status.js, as for a
    submission's status). Reads the stamp each CLASS_TICK_SECONDS on a connection of its own,
    one read at a time per process: a teacher's open page costs a small query a second."""
    if not hmac.compare_digest(wait_key(request, class_id), key[:64]):
        raise HTTPException(404)
    engine, limiter = _live_engine(request.app)
    deadline = asyncio.get_running_loop().time() + CLASS_WAIT_SECONDS
    while asyncio.get_running_loop().time() < deadline:
        if await to_thread.run_sync(_stamp, engine, class_id, limiter=limiter) != seen:
            break
        await asyncio.sleep(CLASS_TICK_SECONDS)
    return Response(status_code=204, headers={"Cache-Control": "no-store"})


def _stamp(engine: Engine, class_id: int) -> str:
    with Session(engine) as session:
        return service.stamp(session, class_id)


def _live_engine(app: FastAPI) -> tuple[Engine, CapacityLimiter]:
    """The live waits' own connection (never one a route waits for), made on first use."""
    found: tuple[Engine, CapacityLimiter] | None = getattr(app.state, "class_live", None)
    if found is None:
        engine = make_engine(
            app.state.settings.database_url, pool_size=1, max_overflow=0, isolation_level="AUTOCOMMIT"
        )
        found = app.state.class_live = (engine, CapacityLimiter(1))
    return found


# ---------------------------------------------------------------- API


@router.post(
    "/api/classes",
    status_code=201,
    response_model=ClassCreated,
    tags=["classes"],
    responses={
        **documented(401, s401="Not signed in"),
        201: {
            "description": "Created; the signed-in account is its teacher",
            "links": {
                "ReadClass": {"operationId": "class_api", "parameters": {"class_id": "$response.body#/id"}}
            },
        },
    },
)
def create_class_api(request: Request, body: ClassIn, session: SessionDep, user: UserDep) -> ClassCreated:
    """Start a class; give learners its join URL (or its code)."""
    classroom = service.create(session, user, body.name, body.course)
    return ClassCreated(
        id=classroom.id, join_code=classroom.join_code, join_url=_join_url(request, classroom.join_code)
    )


@router.post(
    "/api/classes/join",
    response_model=JoinedOut,
    tags=["classes"],
    responses=documented(
        401, 404, s401="Not signed in", s404="No class has this code (renewed, or mistyped)"
    ),
)
def join_api(body: JoinIn, session: SessionDep, user: UserDep) -> JoinedOut:
    """Join a class with its code. Its teachers will then see this account's submissions (code
    and verdicts), quick-check answers and progress, until it leaves."""
    try:
        classroom, member = service.join(session, user, body.code, body.name)
    except service.NotFound:
        raise HTTPException(404) from None
    return JoinedOut(id=classroom.id, name=classroom.name, role=Role(member.role).value)


@router.get(
    "/api/classes/{class_id:int}",
    response_model=ClassReportOut,
    tags=["classes"],
    responses=documented(
        401, 404, s401="Not signed in", s404="No such class, or not one this account teaches"
    ),
)
def class_api(class_id: ClassId, session: SessionDep, user: UserDep, course: CourseDep) -> Response:
    """The class's report, for its teachers: per learner and exercise the status and attempts;
    per exercise the passes and the named mistakes; per quick-check question the wrong options."""
    classroom = _taught(session, class_id, user)
    report = service.report(session, classroom, course)
    # ClassReportOut's shape, built as plain data: validating 500 learners' cells as models took
    # longer than reading them (the document still says ClassReportOut; tests/classes checks both)
    body = {
        "name": classroom.name,
        "course": classroom.course,
        "learners": [
            {
                "id": row.id,
                "name": row.name,
                "exercises": {
                    ex: {"status": c.status, "attempts": c.attempts} for ex, c in row.cells.items()
                },
            }
            for row in report.learners
        ],
        "exercises": {
            ex: {
                "passed": row.passed,
                "attempted": row.attempted,
                "mistakes": {m.id: m.learners for m in row.mistakes},
            }
            for ex, row in report.exercises.items()
        },
        "questions": report.questions,
    }
    return JSONResponse(body)


@router.delete(
    "/api/classes/{class_id:int}/members/me",
    status_code=204,
    tags=["classes"],
    responses=documented(
        401,
        404,
        409,
        s401="Not signed in",
        s404="Not a member of this class",
        s409="The class's only teacher cannot leave it",
    ),
)
def leave_api(class_id: ClassId, session: SessionDep, user: UserDep) -> Response:
    """Leave a class: from now on its teachers see nothing of this account."""
    try:
        left = service.leave(session, class_id, user)
    except service.LastTeacher:
        raise ApiError(
            409, _("You are this class's only teacher: invite another before you leave."), code="conflict"
        ) from None
    if not left:
        raise HTTPException(404)
    return Response(status_code=204)
