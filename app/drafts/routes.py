"""Drafts: the code a learner is writing, saved by the page every few seconds (owner-only)."""

from typing import Annotated

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from app.accounts.auth import LearnerDep
from app.accounts.ownership import Learner
from app.db import SessionDep, aware
from app.drafts import service
from app.errors import ErrorOut
from app.http import client_ip, redirect
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


class Refused(Exception):
    """A save the server will not keep: `status`, a stable `code` and the learner's `message`.
    The editor shows the message and keeps the code in the browser (static/js/editor.js)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def response(self) -> JSONResponse:
        kept = _("Your code is still in the editor and kept in this browser.")
        body = ErrorOut(code=self.code, message=f"{self.message} {kept}")
        return JSONResponse(body.model_dump(exclude_none=True), status_code=self.status)


def _fits(exercise, code: str) -> None:
    """Refused (422) past the exercise's code_kb: a draft is never larger than Submit accepts."""
    if service.bytes_of(code) > exercise.limits.code_kb * 1024:
        raise Refused(
            422,
            "too_large",
            _("This draft is larger than the exercise accepts (%(kb)d KB).")
            % {"kb": exercise.limits.code_kb},
        )


def _save(request: Request, session: Session, learner: Learner, exercise, code: str):
    """Save within the anonymous quota of the request's client (TREINO_ANONYMOUS_DRAFTS_PER_CLIENT,
    TREINO_ANONYMOUS_DRAFT_KB_PER_CLIENT); past it, Refused (429)."""
    settings = request.app.state.settings
    quota = service.Quota(settings.anonymous_drafts_per_client, settings.anonymous_draft_kb_per_client)
    try:
        return service.save_within_quota(
            session, learner, exercise.id, code, client=client_ip(request), quota=quota
        )
    except service.OverQuota:
        raise Refused(
            429,
            "quota",
            _(
                "Visitors without an account on your network have saved as many drafts on the "
                "server as they may. Sign in to keep yours on the server."
            ),
        ) from None


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
    request: Request, body: DraftIn, exercise: ExerciseDep, learner: LearnerDep, session: SessionDep
) -> DraftOut | JSONResponse:
    """Save (upsert) the learner's draft of this exercise. With ``base``, a draft changed elsewhere
    since this edit began is not overwritten: 409 with the server's copy, which the page keeps
    beside the learner's (app/offline, static/js/editor.js). A draft larger than the exercise
    accepts is refused (422), and so is an anonymous save past its client's quota (429): JSON
    `{code, message}`, the message for the learner, who keeps the code in the browser."""
    try:
        _fits(exercise, body.code)
        if body.base is not None:
            current = service.get(session, learner, exercise.id)
            known = code_hash(current.code) if current else ""
            if current is not None and known != body.base and current.code != body.code:
                return JSONResponse(
                    {
                        "code": current.code,
                        "updated_at": aware(current.updated_at).isoformat(),
                        "hash": known,
                    },
                    status_code=409,
                )
        draft = _save(request, session, learner, exercise, body.code)
    except Refused as refused:
        return refused.response()
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
    try:
        _save(request, session, learner, exercise, exercise.starter)
    except Refused as refused:
        raise HTTPException(refused.status, refused.message) from None
    return redirect(
        request,
        str(request.app.url_path_for("exercise_page", slug=exercise.lesson, exercise_slug=exercise.slug))
        + "?reset=1",
    )
