from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Form, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import locks
from app.accounts.auth import LearnerDep
from app.accounts.ownership import Learner
from app.accounts.throttling import Throttled, spend
from app.db import SessionDep, aware
from app.drafts import service as drafts
from app.errors import ApiError, documented, too_many
from app.http import client_ip, here, is_htmx
from app.i18n import gettext as _
from app.lessons.dependencies import CourseDep, ExerciseDep, LessonDep
from app.offline.idempotency import key_of
from app.security import TEXT_PATTERN
from app.submissions import present, queue, service, watch
from app.submissions.editor import phrases
from app.submissions.figures import Figures, figures
from app.submissions.models import Mode, Status, Submission
from app.submissions.schemas import SubmissionCreated, SubmissionId, SubmissionIn, SubmissionOut
from app.submissions.workers import grading_notice
from app.web import render, templates
from contracts.verdict import Verdict

router = APIRouter()
present.install(templates.env)


SUBMIT_WINDOW = timedelta(minutes=10)
QUEUED_RETRY = 30  # seconds: about a quick job's verdict, when a place may be free again


def _fair_use(request: Request, session: Session) -> None:
    """Throttled past TREINO_SUBMISSIONS_PER_ACCOUNT in ten minutes for a signed-in learner,
    counted per account (a classroom behind one address is not one learner); anonymous, past
    TREINO_SUBMISSIONS_PER_IP from one client IP (proxy-aware), since every cookie-less request
    is a new learner, and at most TREINO_QUEUED_PER_CLIENT jobs of that client (an IPv4
    address, an IPv6 /64) waiting or running at once, and at most
    TREINO_ANONYMOUS_CODE_KB_PER_CLIENT of their code kept. Each count is locked until the
    submission's insert commits (app/locks.py): a burst cannot pass on one count."""
    settings = request.app.state.settings
    client = client_ip(request)
    if user := request.state.auth.user:
        spend(session, f"submit-user:{user.id}", settings.submissions_per_account, SUBMIT_WINDOW)
        return
    locks.hold(session, f"queue:{client}")
    waiting = session.scalar(
        select(func.count()).where(
            Submission.client == client,
            Submission.active_owner.is_not(None),
            Submission.user_id.is_(None),
        )
    )
    if (waiting or 0) >= settings.queued_per_client:
        raise Throttled(
            QUEUED_RETRY,
            _(
                "Too much code from your network is waiting to be graded already. Wait for "
                "a verdict, or sign in: each signed-in learner has a place of their own."
            ),
        )
    kept = session.scalar(
        select(func.coalesce(func.sum(func.length(Submission.code)), 0)).where(
            Submission.client == client, Submission.user_id.is_(None)
        )
    )
    if (kept or 0) >= settings.anonymous_code_kb_per_client * 1024:
        raise Throttled(
            QUEUED_RETRY,
            _(
                "Visitors without an account on your network have sent as much code as the "
                "server keeps for them. Sign in to go on: your code is still in the editor."
            ),
        )
    spend(session, f"submit-ip:{client}", settings.submissions_per_ip, SUBMIT_WINDOW)


def busy_message() -> str:
    return _("You already have code waiting to be graded. Wait for its verdict, then send again.")


# ---------------------------------------------------------------- pages


@router.get("/lessons/{slug}/exercises/{exercise_slug}", response_class=HTMLResponse, include_in_schema=False)
def exercise_page(
    request: Request,
    lesson: LessonDep,
    exercise: ExerciseDep,
    course: CourseDep,
    learner: LearnerDep,
    session: SessionDep,
    hints: int = 0,
):
    past = service.history(session, learner, exercise.id)
    latest = past[0] if past else None
    draft = drafts.get(session, learner, exercise.id)
    code = draft.code if draft else latest.code if latest else exercise.starter  # the draft wins
    return render(
        request,
        "exercise.html",
        {
            **_status_view(request, session, learner, latest).context(),
            "course": course,
            "lesson": lesson,
            "exercise": exercise,
            "history": past,
            "place": present.place(course, exercise),
            "code": code,
            "draft_at": aware(draft.updated_at).isoformat() if draft else "",
            "shown": _shown(hints, exercise),
            "reset": request.query_params.get("reset") == "1",
            "editor_phrases": phrases() if request.state.lang != "en" else {},
            "grading_notice": grading_notice(session),
        },
    )


def _shown(asked: int, exercise) -> int:
    return max(0, min(asked, len(exercise.hints)))


@router.get(
    "/lessons/{slug}/exercises/{exercise_slug}/hints", response_class=HTMLResponse, include_in_schema=False
)
def hints_fragment(request: Request, lesson: LessonDep, exercise: ExerciseDep, shown: int = 1):
    """The hints with the first `shown` open: each one is sent only once the previous was asked for."""
    if not is_htmx(request):
        return RedirectResponse(
            str(
                request.url_for(
                    "exercise_page", slug=lesson.slug, exercise_slug=exercise.slug
                ).include_query_params(hints=_shown(shown, exercise))
            )
            + "#hints",
            status_code=303,
        )
    return render(
        request, "_hints.html", {"lesson": lesson, "exercise": exercise, "shown": _shown(shown, exercise)}
    )


@router.post(
    "/lessons/{slug}/exercises/{exercise_slug}/submissions",
    response_class=HTMLResponse,
    include_in_schema=False,
)
def submit_form(
    request: Request,
    lesson: LessonDep,
    exercise: ExerciseDep,
    learner: LearnerDep,
    session: SessionDep,
    code: Annotated[str, Form(pattern=TEXT_PATTERN)],
    mode: Annotated[Mode, Form()] = Mode.SUBMIT,
):
    key = key_of(request.headers)  # code submitted offline, sent again: graded once
    try:
        if key is None or service.with_key(session, learner, key) is None:
            _fair_use(request, session)
        submission = queue.enqueue(
            session,
            learner,
            exercise,
            code,
            mode=mode,
            lang=request.state.lang,
            request_id=request.state.request_id,
            client=client_ip(request),
            key=key,
        )
    except (queue.AlreadyActive, Throttled) as e:
        response = render(
            request,
            "_submission_status.html",
            StatusView().context(announce=True, error=str(e) if isinstance(e, Throttled) else busy_message()),
            status_code=429,
        )
        if isinstance(e, Throttled):
            response.headers["Retry-After"] = str(e.retry_after)
        return response
    if is_htmx(request):
        return _status(request, session, learner, submission, announce=True)
    return RedirectResponse(request.url_for("submission_page", submission_id=submission.id), status_code=303)


@router.get("/submissions/{submission_id}", response_class=HTMLResponse, include_in_schema=False)
def submission_page(
    request: Request, submission_id: SubmissionId, learner: LearnerDep, session: SessionDep, course: CourseDep
):
    submission = service.get_own(session, learner, submission_id)
    if submission is None:
        raise HTTPException(404)
    if is_htmx(request):
        # a poll: announce (and refresh the history) once, when the status has just become final
        return _status(request, session, learner, submission, announce=Status(submission.status).final)
    exercise = course.exercise(submission.exercise)
    return render(
        request,
        "submission.html",
        {
            "course": course,
            "exercise": exercise,
            "lesson": course.lesson(exercise.lesson) if exercise else None,
            **_status_view(request, session, learner, submission).context(),
        },
    )


@router.post("/submissions/{submission_id}/cancel", response_class=HTMLResponse, include_in_schema=False)
def cancel_form(request: Request, submission_id: SubmissionId, learner: LearnerDep, session: SessionDep):
    """Stop waiting: a queued or running submission ends as cancelled (a final one stays as it is)."""
    submission = service.get_own(session, learner, submission_id)
    if submission is None:
        raise HTTPException(404)
    queue.cancel(session, submission)
    if is_htmx(request):
        return _status(request, session, learner, submission, announce=True)
    exercise = request.app.state.course.exercise(submission.exercise)
    if exercise is None:
        return RedirectResponse(
            request.url_for("submission_page", submission_id=submission.id), status_code=303
        )
    return RedirectResponse(
        request.url_for("exercise_page", slug=exercise.lesson, exercise_slug=exercise.slug), status_code=303
    )


WAIT_SECONDS = 5.0  # a wait unanswered this long ends anyway: the page then refreshes the time and place


@router.get("/live/submissions/{submission_id}", include_in_schema=False)
async def submission_changes(
    request: Request, submission_id: SubmissionId, seen: Status, key: str
) -> Response:
    """Answers (204) as soon as the submission's status is no longer ``seen``, or after
    WAIT_SECONDS; then the page fetches the status fragment. On the event loop: no thread, no
    database connection and no account lookup while it waits (``key`` proves the page showed
    this submission; app/submissions/watch.py)."""
    if not watch.valid(request.app.state.settings, submission_id, key):
        raise HTTPException(404)
    await _watch(request.app).changed(submission_id, seen, WAIT_SECONDS)
    return Response(status_code=204, headers={"Cache-Control": "no-store"})


def _wait_url(request: Request, submission: Submission) -> str:
    path = request.app.url_path_for("submission_changes", submission_id=submission.id)
    return f"{path}?seen={submission.status}&key={watch.key(request.app.state.settings, submission.id)}"


@dataclass(frozen=True)
class StatusView:
    """What _submission_status.html (and _verdict.html inside it) shows of one submission, or of
    none yet: the status or verdict, the attempt's number for this learner and exercise, and after
    a pass the way on and the reference solution (also offered, with a warning, after several
    failed tries). ``context()`` is the templates' context."""

    submission: Submission | None = None
    error: str | None = None
    announce: bool = False
    history_oob: list[Submission] | None = None
    queue_position: int | None = None
    elapsed: int | None = None  # whole seconds running
    figures: Figures = field(default_factory=Figures)
    attempts: service.Attempts | None = None
    place: present.Place | None = None
    solution: str | None = None
    failing_line: int | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    pass_meaning: str = ""
    wait_url: str | None = None

    def context(self, **changes: Any) -> dict[str, Any]:
        view = replace(self, **changes)
        return {f.name: getattr(view, f.name) for f in fields(view)}


def _status_view(
    request: Request, session: Session, learner: Learner, submission: Submission | None
) -> StatusView:
    if submission is None:
        return StatusView()
    verdict = present.verdict_of(submission)  # rendered once, in the reader's language
    attempts = service.attempts(session, learner, submission.exercise)
    exercise = request.app.state.course.exercise(submission.exercise)
    final = Status(submission.status).final
    graded = submission.mode == Mode.SUBMIT
    offered = (
        exercise
        and final
        and graded
        and (submission.status == Status.PASSED or attempts.failures >= service.SHOW_SOLUTION_AFTER)
    )
    return StatusView(
        submission=submission,
        queue_position=_queue_order(request.app).position(session, submission),
        elapsed=service.elapsed_seconds(submission),
        attempts=attempts,
        verdict=verdict,
        figures=figures(verdict) if final else Figures(),
        failing_line=present.failing_line(verdict) if final else None,
        place=present.place(request.app.state.course, exercise) if exercise else None,
        pass_meaning=present.pass_meaning(exercise) if submission.status == Status.PASSED else "",
        wait_url=None if final else _wait_url(request, submission),
        solution=present.solution(exercise, request.state.lang) if offered and exercise else None,
    )


def _status(request: Request, session: Session, learner: Learner, submission: Submission, *, announce: bool):
    history = None
    if announce and Status(submission.status).final and "/exercises/" in here(request):
        history = service.history(session, learner, submission.exercise)
    view = _status_view(request, session, learner, submission)
    return render(request, "_submission_status.html", view.context(announce=announce, history_oob=history))


# ---------------------------------------------------------------- API


@router.post(
    "/api/lessons/{slug}/exercises/{exercise_slug}/submissions",
    status_code=202,
    response_model=SubmissionCreated,
    tags=["submissions"],
    responses={
        **documented(
            404,
            429,
            s404="No such lesson or exercise",
            s429=(
                "`already_active`: the learner already has a submission queued or running; "
                "`throttled`: too many from this client address, see Retry-After"
            ),
        ),
        202: {
            "description": "Queued",
            "links": {
                "ReadSubmission": {
                    "operationId": "submission_api",
                    "parameters": {"submission_id": "$response.body#/id"},
                }
            },
        },
    },
)
def submit_api(
    request: Request, body: SubmissionIn, exercise: ExerciseDep, learner: LearnerDep, session: SessionDep
):
    """Queue code for grading (`submit`) or for a plain run (`run`). Poll the submission for the verdict."""
    try:
        _fair_use(request, session)
        submission = queue.enqueue(
            session,
            learner,
            exercise,
            body.code,
            mode=Mode(body.mode),
            lang=request.state.lang,
            request_id=request.state.request_id,
            client=client_ip(request),
        )
    except queue.AlreadyActive:
        raise ApiError(429, busy_message(), code="already_active") from None
    except Throttled as e:
        raise too_many(str(e), e.retry_after) from None
    return SubmissionCreated(id=submission.id, status=Status(submission.status))


@router.get(
    "/api/submissions/{submission_id}",
    response_model=SubmissionOut,
    tags=["submissions"],
    responses=documented(404, s404="No such submission, or not this learner's"),
)
def submission_api(
    request: Request, submission_id: SubmissionId, learner: LearnerDep, session: SessionDep
) -> SubmissionOut:
    """One of the learner's own submissions; anyone else's is 404."""
    submission = service.get_own(session, learner, submission_id)
    if submission is None:
        raise HTTPException(404)
    verdict = present.verdict_of(submission)
    return SubmissionOut(
        id=submission.id,
        exercise=submission.exercise,
        mode=Mode(submission.mode),
        status=Status(submission.status),
        verdict=Verdict.model_validate(verdict) if verdict else None,
        queue_position=_queue_order(request.app).position(session, submission),
    )


def _queue_order(app: FastAPI) -> queue.QueueOrder:
    """The app's shared view of the queue's places, made on first use."""
    found: queue.QueueOrder | None = getattr(app.state, "queue_order", None)
    if found is None:
        found = app.state.queue_order = queue.QueueOrder()
    return found


def _watch(app: FastAPI) -> watch.Watch:
    """The app's watcher (app/submissions/watch.py), made on first use."""
    found: watch.Watch | None = getattr(app.state, "watch", None)
    if found is None:
        found = app.state.watch = watch.Watch(app.state.settings.database_url)
    return found
