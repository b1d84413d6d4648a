"""A learner's way through the course, and the pages that show it: the course, a lesson, a
quick-check answer's feedback, the end of the course; a card reached; the progress API. Progress
reads the lessons, quick checks and submissions, so the pages that show it are here, above them
(tests/test_layers.py: no import cycle between app's folders)."""

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from app.accounts.auth import LearnerDep
from app.accounts.ownership import Learner
from app.db import SessionDep
from app.http import client_ip, is_htmx
from app.i18n import gettext as _
from app.lessons.course import Course, Lesson
from app.lessons.dependencies import CourseDep, LessonDep
from app.offline.idempotency import key_of
from app.progress.schemas import CardOut, LessonProgressOut, ProgressOut, ResumeOut
from app.progress.service import course_progress, reach_card, results, within_quota
from app.quizzes.service import record_attempt
from app.web import render

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def course_page(request: Request, course: CourseDep, session: SessionDep, learner: LearnerDep):
    progress = course_progress(session, learner, course)
    return render(request, "course.html", {"course": course, "progress": progress})


@router.get("/lessons/{slug}", response_class=HTMLResponse, include_in_schema=False)
def lesson_page(
    request: Request, lesson: LessonDep, course: CourseDep, session: SessionDep, learner: LearnerDep
):
    return render(request, "lesson.html", _lesson_context(session, learner, course, lesson))


def _lesson_context(session, learner: Learner, course: Course, lesson: Lesson) -> dict:
    progress = course_progress(session, learner, course).of(lesson)
    return {"course": course, "lesson": lesson, "answers": progress.answers, "progress": progress}


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
            {**_lesson_context(session, learner, course, lesson), "errors": {question.id: error}},
            status_code=422,
        )
    client = client_ip(request)
    kept = within_quota(session, learner, client, request.app.state.settings.anonymous_answers_per_client)
    if kept:
        attempt = record_attempt(
            session, learner, lesson, question, chosen, key=key_of(request.headers), client=client
        )
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
                "not_kept": not kept,
                "progress_oob": progress,
            },
        )
    url = request.url_for("lesson_page", slug=lesson.slug)
    return RedirectResponse(f"{url}#quiz-{question.id}", status_code=303)


@router.post("/lessons/{slug}/cards/{card}", response_class=HTMLResponse, include_in_schema=False)
def card_reached(
    request: Request,
    lesson: LessonDep,
    card: int,
    course: CourseDep,
    session: SessionDep,
    learner: LearnerDep,
):
    """Sent by htmx when a card scrolls into view; answers with the lesson's progress, out of band."""
    if not 0 <= card < len(lesson.text(request.state.lang).cards):
        raise HTTPException(404)
    limit = request.app.state.settings.anonymous_answers_per_client
    reach_card(session, learner, lesson, card, client=client_ip(request), limit=limit)
    if not is_htmx(request):
        return Response(status_code=204)
    progress = course_progress(session, learner, course).of(lesson)
    return render(request, "_lesson_progress.html", {"progress": progress, "oob": True})


@router.get("/course/end", response_class=HTMLResponse, include_in_schema=False)
def course_end_page(request: Request, course: CourseDep, session: SessionDep, learner: LearnerDep):
    """The end of the course: what each lesson taught, how this learner did, where to go next
    (read before the end too: then it says what is left)."""
    progress = course_progress(session, learner, course)
    return render(
        request,
        "course_end.html",
        {
            "course": course,
            "progress": progress,
            "results": {lesson.slug: results(session, learner, lesson) for lesson in course.lessons},
        },
    )


@router.get("/api/progress", response_model=ProgressOut, tags=["progress"])
def read_progress(
    request: Request, course: CourseDep, session: SessionDep, learner: LearnerDep
) -> ProgressOut:
    """Per lesson: cards read, the quick-check, exercises passed; and where to continue."""
    lang = request.state.lang
    progress = course_progress(session, learner, course)

    def url(slug: str, anchor: str = "") -> str:
        return str(request.url_for("lesson_page", slug=slug)) + (f"#{anchor}" if anchor else "")

    lessons = []
    for p in progress.lessons:
        cards = p.lesson.text(lang).cards
        last = p.last_card
        lessons.append(
            LessonProgressOut(
                lesson=p.lesson.slug,
                title=p.lesson.text(lang).title,
                cards_total=p.cards_total,
                cards_read=len(p.cards),
                last_card=None
                if last is None
                else CardOut(
                    index=last, anchor=cards[last].anchor, url=url(p.lesson.slug, cards[last].anchor)
                ),
                quiz_questions=len(p.lesson.questions),
                quiz_questions_right=len(p.questions_right),
                quiz_answered=p.quiz_passed,
                exercises_total=len(p.lesson.exercises),
                exercises_passed=list(p.exercises_passed),
            )
        )
    resume = progress.resume
    if resume is None:
        resume_out = None
    elif resume.exercise:
        resume_out = ResumeOut(
            lesson=resume.lesson.slug,
            url=str(
                request.url_for("exercise_page", slug=resume.lesson.slug, exercise_slug=resume.exercise.slug)
            ),
        )
    else:
        resume_out = ResumeOut(lesson=resume.lesson.slug, url=url(resume.lesson.slug, resume.anchor(lang)))
    return ProgressOut(lang=lang, signed_in=learner.user is not None, lessons=lessons, resume=resume_out)
