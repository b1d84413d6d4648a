from pydantic import BaseModel


class ExerciseOut(BaseModel):
    id: str
    title: str


class LessonOut(BaseModel):
    number: int
    slug: str
    title: str
    subtitle: str
    summary: str
    minutes: int
    url: str
    exercises: list[ExerciseOut]


class CourseOut(BaseModel):
    lang: str
    lessons: list[LessonOut]
