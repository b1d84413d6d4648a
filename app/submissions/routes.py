from typing import Annotated

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from app.accounts.service import LearnerDep
from app.db import SessionDep
from app.i18n import gettext as _
from app.lessons.content import Exercise
from app.lessons.service import CourseDep, LessonDep
from app.submissions import service
from app.submissions.models import Mode, Submission
from app.submissions.schemas import SubmissionCreated, SubmissionIn, SubmissionOut
from app.web import is_htmx, render

router = APIRouter()


def get_exercise(lesson: LessonDep, exercise_slug: str) -> Exercise:
    exercise = next((ex for ex in lesson.exercises if ex.slug == exercise_slug), None)
    if exercise is None:
        raise HTTPException(404)
    return exercise


ExerciseDep = Annotated[Exercise, Depends(get_exercise)]


def busy_message() -> str:
    return _("You already have code waiting to be graded. Wait for its verdict, then send again.")


# ---------------------------------------------------------------- pages

@router.get("/lessons/{slug}/exercises/{exercise_slug}", response_class=HTMLResponse)
def exercise_page(request: Request, lesson: LessonDep, exercise: ExerciseDep, course: CourseDep,
                  learner: LearnerDep, session: SessionDep):
    past = service.history(session, learner, exercise)
    latest = past[0] if past else None
    return render(request, "exercise.html", {
        "course": course, "lesson": lesson, "exercise": exercise, "history": past,
        "code": latest.code if latest else exercise.starter, "submission": latest,
        "queue_position": service.queue_position(session, latest) if latest else None, "error": None,
    })


@router.post("/lessons/{slug}/exercises/{exercise_slug}/submissions", response_class=HTMLResponse)
def submit_form(request: Request, lesson: LessonDep, exercise: ExerciseDep, learner: LearnerDep,
                session: SessionDep, code: Annotated[str, Form()],
                mode: Annotated[Mode, Form()] = Mode.SUBMIT):
    try:
        submission = service.enqueue(session, learner, exercise, code, mode=mode,
                                     lang=request.state.lang)
    except service.AlreadyActive:
        return render(request, "_submission_status.html",
                      {"submission": None, "error": busy_message(), "queue_position": None},
                      status_code=429)
    if is_htmx(request):
        return _status(request, session, submission)
    return RedirectResponse(request.url_for("submission_page", submission_id=submission.id),
                            status_code=303)


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission_page(request: Request, submission_id: int, learner: LearnerDep, session: SessionDep,
                    course: CourseDep):
    submission = service.get_own(session, learner, submission_id)
    if submission is None:
        raise HTTPException(404)
    if is_htmx(request):
        return _status(request, session, submission)
    exercise = course.exercise(submission.exercise)
    return render(request, "submission.html", {
        "course": course, "submission": submission, "exercise": exercise,
        "lesson": course.lesson(exercise.lesson) if exercise else None,
        "queue_position": service.queue_position(session, submission), "error": None,
    })


def _status(request: Request, session, submission: Submission):
    return render(request, "_submission_status.html", {
        "submission": submission, "error": None,
        "queue_position": service.queue_position(session, submission),
    })


# ---------------------------------------------------------------- API

@router.post("/api/lessons/{slug}/exercises/{exercise_slug}/submissions", status_code=202,
             response_model=SubmissionCreated, tags=["submissions"],
             responses={429: {"description": "The learner already has a submission queued or running"}})
def submit_api(request: Request, body: SubmissionIn, exercise: ExerciseDep, learner: LearnerDep,
               session: SessionDep):
    """Queue code for grading (`submit`) or for a plain run (`run`). Poll the submission for the verdict."""
    try:
        submission = service.enqueue(session, learner, exercise, body.code, mode=Mode(body.mode),
                                     lang=request.state.lang)
    except service.AlreadyActive:
        return JSONResponse({"detail": busy_message()}, status_code=429)
    return SubmissionCreated(id=submission.id, status=submission.status)


@router.get("/api/submissions/{submission_id}", response_model=SubmissionOut, tags=["submissions"])
def submission_api(submission_id: int, learner: LearnerDep, session: SessionDep) -> SubmissionOut:
    """One of the learner's own submissions; anyone else's is 404."""
    submission = service.get_own(session, learner, submission_id)
    if submission is None:
        raise HTTPException(404)
    return SubmissionOut(id=submission.id, exercise=submission.exercise, mode=submission.mode,
                         status=submission.status, verdict=submission.verdict,
                         queue_position=service.queue_position(session, submission))
