"""Drafts: the code a learner is writing, saved by the page every few seconds (owner-only)."""

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.accounts.auth import LearnerDep
from app.db import SessionDep, aware
from app.drafts import service
from app.http import redirect
from app.i18n import gettext as _
from app.lessons.dependencies import ExerciseDep
from app.offline.idempotency import code_hash
from app.security import TEXT_PATTERN

router = APIRouter()


class DraftIn(BaseModel):
    code: str = Field(description="The learner's code, as text", pattern=TEXT_PATTERN)
    base: str | None = Field(
        None,
        description="code_hash of the server's copy this edit started from ('' when there was none): "
        "when the server's copy has changed since (another device), the save is refused (409)",
        max_length=16,
    )


class DraftOut(BaseModel):
    code: str
    updated_at: str = Field(description="When the server saved it (ISO 8601, UTC)")


def _fits(exercise, code: str) -> None:
    if len(code.encode("utf-8")) > exercise.limits.code_kb * 1024:
        raise HTTPException(
            422,
            _("This draft is larger than the exercise accepts (%(kb)d KB).")
            % {"kb": exercise.limits.code_kb},
        )


@router.get(
    "/lessons/{slug}/exercises/{exercise_slug}/draft", response_model=DraftOut, include_in_schema=False
)  # the page's own: a visitor's cookie and CSRF token
def read_draft(exercise: ExerciseDep, learner: LearnerDep, session: SessionDep) -> DraftOut:
    """The learner's draft of this exercise; 404 when there is none."""
    draft = service.get(session, learner, exercise.id)
    if draft is None:
        raise HTTPException(404)
    return DraftOut(code=draft.code, updated_at=aware(draft.updated_at).isoformat())


@router.put(
    "/lessons/{slug}/exercises/{exercise_slug}/draft", response_model=DraftOut, include_in_schema=False
)
def save_draft(
    body: DraftIn, exercise: ExerciseDep, learner: LearnerDep, session: SessionDep
) -> DraftOut | JSONResponse:
    """Save (upsert) the learner's draft of this exercise. With ``base``, a draft changed elsewhere
    since this edit began is not overwritten: 409 with the server's copy, which the page keeps
    beside the learner's (app/offline, static/js/editor.js)."""
    _fits(exercise, body.code)
    if body.base is not None:
        current = service.get(session, learner, exercise.id)
        known = code_hash(current.code) if current else ""
        if current is not None and known != body.base and current.code != body.code:
            return JSONResponse(
                {"code": current.code, "updated_at": aware(current.updated_at).isoformat(), "hash": known},
                status_code=409,
            )
    draft = service.save(session, learner, exercise.id, body.code)
    return DraftOut(code=draft.code, updated_at=aware(draft.updated_at).isoformat())


@router.post("/lessons/{slug}/exercises/{exercise_slug}/draft/reset", include_in_schema=False)
def reset_draft(
    request: Request,
    exercise: ExerciseDep,
    learner: LearnerDep,
    session: SessionDep,
    confirm: Annotated[str, Form()] = "",
):
    """Put the starter back (the page asked first: `confirm=yes`)."""
    if confirm != "yes":
        return JSONResponse({"detail": _("Confirm the reset first.")}, status_code=422)
    service.save(session, learner, exercise.id, exercise.starter)
    return redirect(
        request,
        str(request.app.url_path_for("exercise_page", slug=exercise.lesson, exercise_slug=exercise.slug))
        + "?reset=1",
    )
