from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.lessons.schemas import CourseOut, ExerciseOut, LessonOut
from app.lessons.service import CourseDep, LessonDep
from app.quizzes.service import latest_answers
from app.web import render

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def course_page(request: Request, course: CourseDep):
    return render(request, "course.html", {"course": course})


@router.get("/lessons/{slug}", response_class=HTMLResponse)
def lesson_page(request: Request, lesson: LessonDep, course: CourseDep, session: SessionDep):
    answers = latest_answers(session, request.state.visitor_id, lesson)
    return render(request, "lesson.html", lesson_context(course, lesson, answers))


def lesson_context(course, lesson, answers: dict[str, str]) -> dict:
    prev, nxt = course.neighbours(lesson)
    return {"course": course, "lesson": lesson, "prev": prev, "next": nxt, "answers": answers}


@router.get("/api/lessons", response_model=CourseOut, tags=["lessons"])
def list_lessons(request: Request, course: CourseDep) -> CourseOut:
    """The course in the asked language (`?lang=en|pt-BR`; anything else falls back)."""
    lang = request.state.lang
    return CourseOut(lang=lang, lessons=[
        LessonOut(
            number=lesson.number, slug=lesson.slug, title=lesson.text(lang).title,
            subtitle=lesson.text(lang).subtitle, summary=lesson.text(lang).summary,
            minutes=lesson.text(lang).minutes, url=str(request.url_for("lesson_page", slug=lesson.slug)),
            exercises=[ExerciseOut(id=ex.id, title=ex.title[lang]) for ex in lesson.exercises],
        )
        for lesson in course.lessons
    ])
