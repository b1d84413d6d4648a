from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.accounts.auth import LearnerDep
from app.accounts.ownership import Learner
from app.db import SessionDep
from app.lessons.dependencies import CourseDep, LessonDep
from app.lessons.schemas import CourseOut, ExerciseOut, LessonOut
from app.progress.service import course_progress
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
    return render(request, "lesson.html", lesson_context(session, learner, course, lesson))


def lesson_context(session, learner: Learner, course, lesson) -> dict:
    progress = course_progress(session, learner, course).of(lesson)
    return {"course": course, "lesson": lesson, "answers": progress.answers, "progress": progress}


@router.get("/api/lessons", response_model=CourseOut, tags=["lessons"])
def list_lessons(request: Request, course: CourseDep) -> CourseOut:
    """The course in the asked language (`?lang=en|pt-BR`; anything else falls back)."""
    lang = request.state.lang
    return CourseOut(
        lang=lang,
        lessons=[
            LessonOut(
                number=lesson.number,
                slug=lesson.slug,
                title=lesson.text(lang).title,
                subtitle=lesson.text(lang).subtitle,
                summary=lesson.text(lang).summary,
                minutes=lesson.text(lang).minutes,
                url=str(request.url_for("lesson_page", slug=lesson.slug)),
                exercises=[ExerciseOut(id=ex.id, title=ex.title[lang]) for ex in lesson.exercises],
            )
            for lesson in course.lessons
        ],
    )
