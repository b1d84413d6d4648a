"""The course, a lesson and an exercise, as FastAPI dependencies of the routes that name them
in their path (`{slug}`, `{exercise_slug}`): a 404 when there is no such thing."""

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from app.lessons.course import Course, Exercise, Lesson, load_course


async def get_course(request: Request) -> Course:
    state = request.app.state
    if state.settings.reload_lessons:  # authoring: see edits without a restart
        state.course = await run_in_threadpool(load_course, state.settings.lessons_dir)
    return state.course


CourseDep = Annotated[Course, Depends(get_course)]


async def get_lesson(slug: str, course: CourseDep) -> Lesson:
    lesson = course.lesson(slug)
    if lesson is None:
        raise HTTPException(404)
    return lesson


LessonDep = Annotated[Lesson, Depends(get_lesson)]


async def get_exercise(lesson: LessonDep, exercise_slug: str) -> Exercise:
    exercise = next((ex for ex in lesson.exercises if ex.slug == exercise_slug), None)
    if exercise is None:
        raise HTTPException(404)
    return exercise


ExerciseDep = Annotated[Exercise, Depends(get_exercise)]
