from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import HTMLResponse

from app.accounts.auth import LearnerDep
from app.db import SessionDep
from app.http import is_htmx
from app.lessons.dependencies import CourseDep, LessonDep
from app.progress.schemas import CardOut, LessonProgressOut, ProgressOut, ResumeOut
from app.progress.service import course_progress, reach_card, results
from app.web import render

router = APIRouter()


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
    reach_card(session, learner, lesson, card)
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
