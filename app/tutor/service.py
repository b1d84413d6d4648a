"""The tutor's rows: conversations per learner and exercise or lesson card, the budgets they
are counted against, and the figures /metrics gives.

A budget is checked and spent in one transaction that holds a lock on it (`check_budget`,
app/locks.py), so questions asked at once cannot all read "one left" and all be stored. A
signed-in learner has budgets of their own (a classroom behind one address does not share
one); anonymous visitors, each of whom a fresh cookie makes anew, share their address's.

What is spent is known only when an answer ends, so a question reserves its whole possible cost
(its prompt and the longest answer) when it is asked, in that same transaction, and its answer
settles to what it really used however it ends (`settle`): questions asked before any answer is
read cannot each find the budget untouched. A learner has one answer on its way at a time, and
an answer its process never settled (the process died) is settled once its time is up."""

import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from app import locks, prometheus
from app.accounts.ownership import Learner, owned_by
from app.config import Settings
from app.db import aware, utcnow
from app.i18n import gettext as _
from app.i18n import ngettext
from app.tutor.models import TutorMessage

WINDOW = timedelta(hours=1)
SHOWN = 40  # turns shown again on the page
ON_ITS_WAY = ("pending", "running")  # an answer asked for that has not ended: it holds a reservation
# after its time is up, how long an answer's own process has to settle it before anyone else does
SETTLE_GRACE = timedelta(seconds=10)


class OverBudget(Exception):
    """Past a budget: the message says which and when to come back (`retry_after`, seconds)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Busy(Exception):
    """The learner's previous answer is still on its way: one at a time (the message says so)."""


def conversation(
    session: Session, learner: Learner, exercise_id: str | None = None, *, card: str | None = None
) -> list[TutorMessage]:
    """The learner's conversation about one exercise or one card (`card`, see models.py), oldest
    first (the last SHOWN turns)."""
    about = TutorMessage.card == card if card is not None else TutorMessage.exercise == exercise_id
    rows = session.scalars(
        select(TutorMessage)
        .where(owned_by(TutorMessage, learner), about)
        .order_by(TutorMessage.id.desc())
        .limit(SHOWN)
    )
    return list(reversed(list(rows)))


@dataclass
class Spent:
    messages: int
    tokens: int  # used by answers that ended
    reserved: int  # held by answers on their way
    oldest: float | None  # seconds ago of the oldest counted question


def _spent(session: Session, *where) -> Spent:
    since = utcnow() - WINDOW
    questions, oldest = session.execute(
        select(func.count(), func.min(TutorMessage.created_at)).where(
            TutorMessage.role == "learner", TutorMessage.created_at > since, *where
        )
    ).one()
    tokens, reserved = session.execute(
        select(
            func.coalesce(func.sum(TutorMessage.prompt_tokens + TutorMessage.completion_tokens), 0),
            func.coalesce(func.sum(TutorMessage.reserved_tokens), 0),
        ).where(TutorMessage.role == "tutor", TutorMessage.created_at > since, *where)
    ).one()
    age = (utcnow() - aware(oldest)).total_seconds() if oldest is not None else None
    return Spent(questions or 0, int(tokens or 0), int(reserved or 0), age)


def check_budget(session: Session, settings: Settings, learner: Learner, client: str) -> None:
    """OverBudget when this learner asked too many questions or used too many tokens in the
    last hour, or, anonymous, everyone anonymous behind this client IP did; Busy while this
    learner's previous answer is on its way; OverBudget, for the time answers take, while the
    reservations of answers on their way (others' behind this IP) hold the rest of a budget.
    Locks the budgets first (app/locks.py): the caller stores the question and its reservation
    (`ask`) in the same transaction, and the locks go with its commit."""
    who = f"user:{learner.user.id}" if learner.user else f"visitor:{learner.visitor_id}"
    budgets = [
        (owned_by(TutorMessage, learner), settings.tutor_messages_per_hour, settings.tutor_tokens_per_hour)
    ]
    names = [f"tutor:{who}"]
    if learner.user is None:
        here = and_(TutorMessage.client == client, TutorMessage.user_id.is_(None))
        budgets.append((here, settings.tutor_messages_per_ip_hour, settings.tutor_tokens_per_ip_hour))
        names.append(f"tutor-ip:{client}")
    locks.hold(session, *names)
    _settle_abandoned(session, settings, or_(*(where for where, _m, _t in budgets)))
    spent = [(_spent(session, where), messages, tokens) for where, messages, tokens in budgets]
    for used, messages, tokens in spent:  # waiting for the answer on its way would not help
        if used.messages >= messages or used.tokens >= tokens:
            raise _over_budget(WINDOW.total_seconds() - (used.oldest or 0))
    if _on_its_way(session, learner):
        raise Busy(
            _(
                "The tutor is still answering your previous question, here or in another tab. "
                "Wait for that answer to end (or press Stop), then ask again."
            )
        )
    for used, _messages, tokens in spent:  # what the answers on their way leave, once they end
        if used.tokens + used.reserved >= tokens:
            raise _over_budget(time_limit(settings).total_seconds())


def _over_budget(seconds: float) -> OverBudget:
    """OverBudget, with when to come back (at least a minute)."""
    wait = max(60, int(seconds))
    minutes = math.ceil(wait / 60)
    return OverBudget(
        ngettext(
            "You have asked the tutor a lot this hour. Try again in %(num)d minute; "
            "meanwhile the hints and the lesson cards are here.",
            "You have asked the tutor a lot this hour. Try again in %(num)d minutes; "
            "meanwhile the hints and the lesson cards are here.",
            minutes,
        )
        % {"num": minutes},
        wait,
    )


def _on_its_way(session: Session, learner: Learner) -> bool:
    """Whether an answer of this learner's is pending or streaming (abandoned ones settled)."""
    answers = select(TutorMessage.id).where(
        owned_by(TutorMessage, learner), TutorMessage.role == "tutor", TutorMessage.status.in_(ON_ITS_WAY)
    )
    return session.scalar(answers.limit(1)) is not None


def ask(
    session: Session,
    learner: Learner,
    exercise_id: str | None,
    question: str,
    *,
    lang: str,
    client: str,
    prompt: list[dict[str, str]],
    max_tokens: int,
    card: str | None = None,
) -> TutorMessage:
    """Store the question and a pending answer holding the messages to send; the answer's row.
    About an exercise (`exercise_id`) or, with `exercise_id` None, a lesson card (`card`). The
    answer reserves the question's whole cost: its prompt and the longest answer (`max_tokens`)."""
    owner = {**learner.owner, "exercise": exercise_id, "card": card}
    session.add(
        TutorMessage(
            **owner, role="learner", status="answered", content=question, lang=lang,
            client=client, created_at=utcnow(),
        )
    )  # fmt: skip
    answer = TutorMessage(
        **owner, role="tutor", status="pending", content="", lang=lang,
        client=client, prompt=json.dumps(prompt, ensure_ascii=False), created_at=utcnow(),
        reserved_tokens=estimate_tokens(prompt) + max_tokens,
    )  # fmt: skip
    session.add(answer)
    session.flush()
    return answer


def estimate_tokens(prompt: list[dict[str, str]]) -> int:
    """About four characters a token: for servers that do not report usage while streaming."""
    return max(1, sum(len(m["content"]) for m in prompt) // 4)


def time_limit(settings: Settings) -> timedelta:
    """An answer's time, from its question to its end (TUTOR_TIMEOUT_SECONDS)."""
    return timedelta(seconds=settings.tutor_timeout_seconds)


def settle(session: Session, answer_id: int, **values: Any) -> None:
    """End a running answer with what it really used (`prompt_tokens`, `completion_tokens`)
    in place of its reservation, and its outcome; nothing when it has ended already (settled
    by `_settle_abandoned`)."""
    session.execute(
        update(TutorMessage)
        .where(TutorMessage.id == answer_id, TutorMessage.status == "running")
        .values(prompt=None, reserved_tokens=0, **values)
    )


def _settle_abandoned(session: Session, settings: Settings, where: ColumnElement[bool]) -> None:
    """Settle the answers (of `where`) still on their way after their time is up and a grace:
    their process is gone (it died, or its reader left before the stream began) or their stream
    was never read. One that began pays its prompt, as a stream closed before its first token
    does; one never read sent nothing and pays nothing. Either ends `failed`."""
    cutoff = utcnow() - time_limit(settings) - SETTLE_GRACE
    abandoned = session.execute(
        select(TutorMessage.id, TutorMessage.status, TutorMessage.prompt).where(
            where,
            TutorMessage.role == "tutor",
            TutorMessage.status.in_(ON_ITS_WAY),
            TutorMessage.created_at < cutoff,
        )
    ).all()
    for answer_id, status, prompt in abandoned:
        began = status == "running"
        messages = json.loads(prompt or "{}").get("messages", []) if began else []
        session.execute(
            update(TutorMessage)
            .where(TutorMessage.id == answer_id, TutorMessage.status == status)
            .values(
                status="failed",
                prompt=None,
                reserved_tokens=0,
                prompt_tokens=estimate_tokens(messages) if began else 0,
            )
        )


def metrics_lines(session: Session, settings: Settings, reachable: bool | None) -> list[str]:
    """The tutor's part of /metrics: counts and sums from the database, no answer read whole."""
    lines = prometheus.family("treino_tutor_configured", "gauge", "1 when TREINO_TUTOR_URL is set.")
    lines.append(f"treino_tutor_configured {int(bool(settings.tutor_url))}")
    lines += prometheus.family(
        "treino_tutor_reachable", "gauge", "1 when the tutor's endpoint answered its last probe."
    )
    lines.append(f"treino_tutor_reachable {int(bool(reachable))}")
    by_status = dict(
        session.execute(
            select(TutorMessage.status, func.count())
            .where(TutorMessage.role == "tutor")
            .group_by(TutorMessage.status)
        ).all()
    )
    lines += prometheus.family("treino_tutor_answers_total", "counter", "Tutor answers, by outcome.")
    for status in ("answered", "withheld", "failed", "cancelled", "pending", "running"):
        lines.append(f'treino_tutor_answers_total{{status="{status}"}} {by_status.get(status, 0)}')
    prompt, completion = session.execute(
        select(
            func.coalesce(func.sum(TutorMessage.prompt_tokens), 0),
            func.coalesce(func.sum(TutorMessage.completion_tokens), 0),
        ).where(TutorMessage.role == "tutor")
    ).one()
    lines += prometheus.family(
        "treino_tutor_tokens_total", "counter", "Tokens sent to and received from the tutor's model."
    )
    lines.append(f'treino_tutor_tokens_total{{kind="prompt"}} {int(prompt)}')
    lines.append(f'treino_tutor_tokens_total{{kind="completion"}} {int(completion)}')
    for name, column, help_text in (
        ("treino_tutor_first_token_seconds", TutorMessage.first_token_ms, "From question to first word."),
        ("treino_tutor_answer_seconds", TutorMessage.duration_ms, "From question to the answer's end."),
    ):
        seconds = column / 1000.0
        lines += prometheus.histogram(
            session, name, help_text, seconds, column.is_not(None), (0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
        )
    return lines
