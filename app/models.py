"""Every table, imported in one place so migrations and tests see the whole schema."""

from app.accounts.models import AuthSession, ThrottleHit, User
from app.classes.models import Classroom, Member
from app.drafts.models import Draft
from app.progress.models import CardReached
from app.quizzes.models import QuizAttempt
from app.submissions.models import Submission
from app.submissions.workers import WorkerBeat
from app.tutor.models import TutorMessage

__all__ = [
    "AuthSession",
    "CardReached",
    "Classroom",
    "Draft",
    "Member",
    "QuizAttempt",
    "Submission",
    "ThrottleHit",
    "TutorMessage",
    "User",
    "WorkerBeat",
]
