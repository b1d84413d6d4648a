from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from app.accounts.auth import LearnerDep
from app.db import SessionDep
from app.http import is_htmx
from app.i18n import gettext as _
from app.lessons.dependencies import CourseDep, LessonDep
from app.lessons.routes import lesson_context
from app.offline.idempotency import key_of
from app.progress.service import course_progress
from app.quizzes.service import record_attempt
from app.web import render

router = APIRouter()


@router.post("/lessons/{slug}/quiz/{question_id}", response_class=HTMLResponse, include_in_schema=False)
def answer(
    request: Request,
    lesson: LessonDep,
    course: CourseDep,
    question_id: str,
    session: SessionDep,
    learner: LearnerDep,
    option: Annotated[str | None, Form(max_length=80)] = None,
):
    """Check one answer. htmx gets the feedback fragment (and the lesson's progress, out of band);
    a plain form post gets the page back (303 to the lesson, which shows the stored answer)."""
    question = lesson.question(question_id)
    if question is None:
        raise HTTPException(404)
    chosen = question.option(option) if option else None
    if chosen is None:
        error = (
            _("Choose one of the answers, then check it.")
            if not option
            else _("That answer is not one of this question's options.")
        )
        if is_htmx(request):
            return render(
                request,
                "_quiz_feedback.html",
                {"lesson": lesson, "question": question, "chosen": None, "error": error},
                status_code=422,
            )
        return render(
            request,
            "lesson.html",
            {**lesson_context(session, learner, course, lesson), "errors": {question.id: error}},
            status_code=422,
        )
    attempt = record_attempt(session, learner, lesson, question, chosen, key=key_of(request.headers))
    chosen = question.option(attempt.option) or chosen  # sent again: the answer given first
    if is_htmx(request):
        progress = course_progress(session, learner, course).of(lesson)
        return render(
            request,
            "_quiz_feedback.html",
            {
                "lesson": lesson,
                "question": question,
                "chosen": chosen,
                "error": None,
                "progress_oob": progress,
            },
        )
    url = request.url_for("lesson_page", slug=lesson.slug)
    return RedirectResponse(f"{url}#quiz-{question.id}", status_code=303)
