"""The course as data for programs: `/api/lessons`. The pages that show it with a learner's
progress are app/progress/routes.py's."""

from fastapi import APIRouter, Request

from app.lessons.dependencies import CourseDep
from app.lessons.schemas import CourseOut, ExerciseOut, LessonOut

router = APIRouter()


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
