from pydantic import BaseModel, Field


class CardOut(BaseModel):
    index: int = Field(description="0-based; the same card in every language")
    anchor: str
    url: str


class LessonProgressOut(BaseModel):
    lesson: str
    title: str
    cards_total: int
    cards_read: int
    last_card: CardOut | None = Field(description="The furthest card reached")
    quiz_questions: int
    quiz_questions_right: int
    quiz_answered: bool = Field(description="Every quick-check question answered right at least once")
    exercises_total: int
    exercises_passed: list[str] = Field(description="Ids of the exercises passed")


class ResumeOut(BaseModel):
    lesson: str
    url: str


class ProgressOut(BaseModel):
    lang: str
    signed_in: bool = Field(description="False: the progress of this anonymous visitor only")
    lessons: list[LessonProgressOut]
    resume: ResumeOut | None = Field(
        description="Where to continue; null before starting and once the course is complete"
    )
