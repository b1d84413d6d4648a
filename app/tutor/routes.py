"""The tutor's routes: a question (POST, a page's own: cookie and CSRF token) stores the
question and a pending answer and says where to read it; the answer then streams as server-sent
events from /live/tutor/<id> (no gate place, thread or connection held while the model writes:
it is proven by a key, like a submission's wait). Questions are about an exercise (its page's
panel, a template global) or a lesson card (a folded "Ask the tutor" under each card of the
lesson page, whose panel is fetched when first opened: the cards are the same for everyone)."""

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from jinja2 import pass_context
from markupsafe import Markup
from pydantic import BaseModel, Field
from sqlalchemy import update

from app import i18n
from app.accounts.auth import LearnerDep
from app.accounts.ownership import Learner
from app.config import Settings
from app.db import SessionDep, aware, utcnow
from app.http import client_ip
from app.i18n import gettext as _
from app.lessons.course import Card, Exercise, Lesson
from app.lessons.dependencies import ExerciseDep, LessonDep
from app.security import TEXT_PATTERN
from app.submissions import present
from app.submissions import service as submissions
from app.submissions.models import Mode, Status
from app.tutor import client, grounding, guard, service
from app.tutor.models import TutorMessage
from app.web import templates
from contracts.languages import LANGS

router = APIRouter()

MAX_QUESTION = 2000


class QuestionIn(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_QUESTION, pattern=TEXT_PATTERN)
    code: str = Field(default="", pattern=TEXT_PATTERN)
    hints: int = Field(default=0, ge=0, le=50, description="How many hints the page has open")


class CardQuestionIn(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_QUESTION, pattern=TEXT_PATTERN)


def stream_key(settings: Settings, answer_id: int) -> str:
    secret = settings.secret_key.get_secret_value().encode()
    return hmac.new(secret, f"tutor:{answer_id}".encode(), hashlib.sha256).hexdigest()[:32]


def _unlocked(session, learner: Learner, exercise: Exercise) -> bool:
    """Passed, or failed often enough that the page offers the reference solution."""
    attempts = submissions.attempts(session, learner, exercise.id)
    return attempts.first_pass is not None or attempts.failures >= submissions.SHOW_SOLUTION_AFTER


def _latest_verdict(session, learner: Learner, exercise: Exercise) -> dict[str, Any]:
    for sub in submissions.history(session, learner, exercise.id, limit=10):
        if Status(sub.status).final and sub.status != Status.CANCELLED and sub.verdict:
            verdict = present.verdict_of(sub)
            if sub.mode == Mode.RUN:
                verdict = {**verdict, "status": "run, not graded"}
            return verdict
    return {}


def _secrets(exercise: Exercise, code: str) -> list[str]:
    """The solution lines this learner has not seen (see guard.py)."""
    known = [
        exercise.starter,
        code,
        *exercise.prompt.values(),
        *(t for h in exercise.hints for t in h.values()),
    ]
    return guard.secret_lines(present.solution(exercise), known)


@router.post("/lessons/{slug}/exercises/{exercise_slug}/tutor", include_in_schema=False)
def ask_tutor(
    request: Request, body: QuestionIn, exercise: ExerciseDep, learner: LearnerDep, session: SessionDep
):
    """Store the question and a pending answer; 202 with the URL its answer streams from, 429
    past a budget, 409 while the learner's previous answer is on its way, 404 without a tutor."""
    settings: Settings = request.app.state.settings
    if not settings.tutor_url:
        raise HTTPException(404)
    if len(body.code.encode("utf-8")) > exercise.limits.code_kb * 1024:
        return JSONResponse(
            {"message": _("Your code is larger than the exercise accepts (%(kb)d KB).")
             % {"kb": exercise.limits.code_kb}},
            status_code=422,
        )  # fmt: skip
    where = client_ip(request)
    if refused := _check_budget(session, settings, learner, where):
        return refused
    lang = request.state.lang
    unlocked = _unlocked(session, learner, exercise)
    history = _history(service.conversation(session, learner, exercise.id))
    situation = grounding.Situation(
        lang=lang,
        exercise=exercise,
        code=body.code,
        question=body.question.strip(),
        hints_open=body.hints,
        verdict=_latest_verdict(session, learner, exercise),
        solution=present.solution(exercise, lang) if unlocked else None,
        history=history,
    )
    prompt = grounding.messages(situation, grounding.glossary(settings.lessons_dir))
    answer = service.ask(
        session, learner, exercise.id, situation.question,
        lang=lang, client=where, prompt=prompt, max_tokens=settings.tutor_max_tokens,
    )  # fmt: skip
    stored = {"messages": prompt, "code": body.code, "hints": body.hints, "guard": not unlocked}
    return _queued(request, settings, answer, stored)


def _queued(
    request: Request, settings: Settings, answer: TutorMessage, stored: dict[str, Any]
) -> JSONResponse:
    """The answer's row holds what its stream needs; 202 with where to read it."""
    answer.prompt = json.dumps(stored, ensure_ascii=False)
    path = request.app.url_path_for("tutor_stream", answer_id=answer.id)
    return JSONResponse(
        {"id": answer.id, "stream": f"{path}?key={stream_key(settings, answer.id)}"}, status_code=202
    )


def _history(rows: list[TutorMessage]) -> list[tuple[str, str]]:
    """The turns of a conversation the model is shown again: those that were answered."""
    return [(m.role, m.content) for m in rows if m.content and m.status in ("answered", "withheld")]


def _check_budget(session, settings: Settings, learner: Learner, where: str) -> JSONResponse | None:
    """The refusal to send instead of asking (service.check_budget): 429 past a budget, with
    when to come back; 409 while the learner's previous answer is on its way. None: ask."""
    try:
        service.check_budget(session, settings, learner, where)
    except service.OverBudget as e:
        return JSONResponse({"message": str(e)}, status_code=429, headers={"Retry-After": str(e.retry_after)})
    except service.Busy as e:
        return JSONResponse({"message": str(e)}, status_code=409)
    return None


def card_key(lesson: Lesson, index: int) -> str:
    """A card's conversation key: the lesson and the card's English anchor (the same card in
    either language; the anchors of the other language follow its own headings)."""
    return f"{lesson.slug}/{lesson.text(LANGS[0]).cards[index].anchor}"


def _card(request: Request, lesson: Lesson, index: int) -> Card:
    cards = lesson.text(request.state.lang).cards
    if not 0 <= index < len(cards):
        raise HTTPException(404)
    return cards[index]


@router.post("/lessons/{slug}/cards/{card}/tutor", include_in_schema=False)
def ask_tutor_on_card(
    request: Request,
    body: CardQuestionIn,
    lesson: LessonDep,
    card: int,
    learner: LearnerDep,
    session: SessionDep,
):
    """A question about one card of a lesson: 202 with the URL its answer streams from, 429 past
    a budget (the same budgets as an exercise's), 409 while the learner's previous answer is on
    its way (on a card or an exercise), 404 without a tutor or such a card."""
    settings: Settings = request.app.state.settings
    if not settings.tutor_url:
        raise HTTPException(404)
    shown = _card(request, lesson, card)
    key = card_key(lesson, card)
    where = client_ip(request)
    if refused := _check_budget(session, settings, learner, where):
        return refused
    lang = request.state.lang
    history = _history(service.conversation(session, learner, card=key))
    situation = grounding.CardSituation(
        lang=lang,
        lesson_title=lesson.text(lang).title,
        heading_html=shown.heading_html,
        body_html=shown.body_html,
        question=body.question.strip(),
        history=history,
    )
    prompt = grounding.card_messages(situation, grounding.glossary(settings.lessons_dir))
    answer = service.ask(
        session, learner, None, situation.question,
        lang=lang, client=where, prompt=prompt, max_tokens=settings.tutor_max_tokens, card=key,
    )  # fmt: skip
    # the card's answer is guarded too: it must not write the lesson's exercises for the learner
    locked = [ex.id for ex in lesson.exercises if not _unlocked(session, learner, ex)]
    return _queued(request, settings, answer, {"messages": prompt, "guard_exercises": locked})


def _event(name: str, **data: Any) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _claim(request: Request, answer_id: int) -> TutorMessage | None:
    """The pending answer, now `running` (so a second reader of the same URL gets nothing);
    nothing once its time is up (it is settled as abandoned, service.py)."""
    settings: Settings = request.app.state.settings
    with request.app.state.sessionmaker.begin() as session:
        claimed = session.execute(
            update(TutorMessage)
            .where(
                TutorMessage.id == answer_id,
                TutorMessage.status == "pending",
                TutorMessage.created_at > utcnow() - service.time_limit(settings),
            )
            .values(status="running")
        ).rowcount
        row = session.get(TutorMessage, answer_id)
        if row is not None:
            session.expunge(row)
        return row if claimed else None


def _settle(request: Request, answer_id: int, **values: Any) -> None:
    with request.app.state.sessionmaker.begin() as session:
        service.settle(session, answer_id, **values)


def unavailable_message(kind: str) -> str:
    if kind == "slow":
        return _(
            "The tutor is taking too long to answer right now. Your question is kept: try again in a while."
        )
    if kind == "refused":
        return _("The tutor could not answer this question. Your question is kept: try again in a while.")
    return _("The tutor is unavailable right now. Your question is kept: try again in a while.")


def withheld_message(exercise: Exercise | None, lang: str, hints: int) -> str:
    """What replaces an answer that gave the solution away: a hint the learner has not read yet."""
    text = _("That answer gave away the reference solution, so it is not shown.")
    if exercise and exercise.hints:
        hint = exercise.hints[min(hints, len(exercise.hints) - 1)][lang]
        text += " " + _("A hint instead:") + " " + hint
    return text


@router.get("/live/tutor/{answer_id}", include_in_schema=False)
async def tutor_stream(request: Request, answer_id: int, key: str) -> StreamingResponse:
    """The answer as server-sent events: `token` (text to add), then one of `done`, `withheld`
    (text replacing the answer), `failed` (why there is no answer); never an error status once
    the key is right."""
    settings: Settings = request.app.state.settings
    if not hmac.compare_digest(stream_key(settings, answer_id), key) or not settings.tutor_url:
        raise HTTPException(404)
    row = await anyio.to_thread.run_sync(_claim, request, answer_id)
    if row is None:
        raise HTTPException(404)
    return StreamingResponse(
        _answer(request, settings, row),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _answer(request: Request, settings: Settings, row: TutorMessage) -> AsyncIterator[bytes]:
    i18n.set_lang(row.lang)
    stored = json.loads(row.prompt or "{}")
    prompt: list[dict[str, str]] = stored.get("messages", [])
    course = request.app.state.course
    exercise = course.exercise(row.exercise) if row.exercise else None
    secrets = _secrets(exercise, stored.get("code", "")) if exercise and stored.get("guard") else []
    groups = None
    if row.card:  # asked on a card: the solutions of the lesson's exercises not yet passed
        groups = [_secrets(ex, "") for i in stored.get("guard_exercises", []) if (ex := course.exercise(i))]
        secrets = list(dict.fromkeys(line for group in groups for line in group))
    watch = guard.Guard(secrets, settings.tutor_overlap_threshold, groups)
    usage = client.Usage()
    start = time.monotonic()
    # the answer's time counts from its question: what lets an abandoned one be settled then
    left = aware(row.created_at) + service.time_limit(settings) - utcnow()
    pieces = client.chat(settings, prompt, usage, deadline=start + left.total_seconds())
    first: int | None = None
    outcome: dict[str, Any] = {"status": "cancelled"}
    last = b""  # the event that ends the stream, sent once the answer is settled
    try:
        yield b": answering\n\n"  # headers and a first byte at once: the page knows it is on its way
        async for text in pieces:
            if first is None:
                first = int((time.monotonic() - start) * 1000)
            sent = watch.feed(text)
            if watch.withheld:
                break
            if sent:
                yield _event("token", text=sent)
        if not watch.withheld and (rest := watch.close()):
            yield _event("token", text=rest)
        if watch.withheld:
            message = withheld_message(exercise, row.lang, int(stored.get("hints", 0)))
            outcome = {"status": "withheld", "content": message}
            last = _event("withheld", text=message)
        else:
            outcome = {"status": "answered", "content": watch.shown}
            # the whole answer as the page keeps it (Markdown, raw HTML escaped), and whether the
            # model stopped at the answer's length limit, which the page then says
            last = _event("done", html=present.markdown(watch.shown), cut=usage.finish_reason == "length")
    except client.Unavailable as e:
        message = unavailable_message(e.kind)
        outcome = {"status": "failed", "content": message}
        last = _event("failed", text=message, kind=e.kind)
    finally:
        if outcome["status"] == "cancelled":
            outcome["content"] = watch.shown
        values = {
            **outcome,
            # however it ended, the prompt was sent: a stream closed before its first token pays it
            "prompt_tokens": usage.prompt_tokens or service.estimate_tokens(prompt),
            "completion_tokens": usage.completion_tokens,
            "first_token_ms": first,
            "duration_ms": int((time.monotonic() - start) * 1000),
        }
        with anyio.CancelScope(shield=True):
            await pieces.aclose()  # stops the model: the connection closes
            await anyio.to_thread.run_sync(lambda: _settle(request, row.id, **values))
    # settled first: a page that asks again as soon as it reads the end is not told "still answering"
    yield last


# ---------------------------------------------------------------- the panel


@pass_context
def tutor_panel(context: dict[str, Any], exercise: Exercise) -> Markup:
    """The chat panel of an exercise page, with this learner's conversation; nothing without a
    tutor (TREINO_TUTOR_URL unset)."""
    request = context["request"]
    settings: Settings = request.app.state.settings
    if not settings.tutor_url:
        return Markup("")
    learner = Learner(request.state.visitor_id, request.state.auth.user)
    with request.app.state.reader() as session:
        turns = service.conversation(session, learner, exercise.id)
    template = templates.env.get_template("_tutor.html")
    return Markup(
        template.render(
            request=request,
            lang=context["lang"],
            kind="exercise",
            panel_id="tutor",
            turns=turns,
            ask_url=request.app.url_path_for("ask_tutor", slug=exercise.lesson, exercise_slug=exercise.slug),
        )
    )


@pass_context
def tutor_enabled(context: dict[str, Any]) -> bool:
    """Whether pages offer the tutor (TREINO_TUTOR_URL set): the same for every visitor."""
    return bool(context["request"].app.state.settings.tutor_url)


@router.get("/lessons/{slug}/cards/{card}/tutor", response_class=HTMLResponse, include_in_schema=False)
def card_tutor_panel(
    request: Request, lesson: LessonDep, card: int, learner: LearnerDep, session: SessionDep
) -> HTMLResponse:
    """The panel of one card, with this learner's conversation about it: fetched by the page
    when the card's "Ask the tutor" is first opened."""
    if not request.app.state.settings.tutor_url:
        raise HTTPException(404)
    shown = _card(request, lesson, card)
    turns = service.conversation(session, learner, card=card_key(lesson, card))
    html = templates.env.get_template("_tutor.html").render(
        request=request,
        lang=request.state.lang,
        kind="card",
        panel_id=f"tutor-{shown.anchor}",
        turns=turns,
        ask_url=request.app.url_path_for("ask_tutor_on_card", slug=lesson.slug, card=str(card)),
    )
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


templates.env.globals["tutor_panel"] = tutor_panel
templates.env.globals["tutor_enabled"] = tutor_enabled
