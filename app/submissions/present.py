"""How a submission reads on the page: its outcome in words, and when it was sent."""

import re
from datetime import datetime

from babel.dates import format_timedelta
from jinja2 import Environment
from markupsafe import Markup, escape

from app.db import aware, utcnow
from app.i18n import current_lang, locale_name
from app.i18n import gettext as _
from app.submissions.models import Mode, Status, Submission
from app.web import status_label


def outcome_label(submission: Submission) -> str:
    """A run that ran "Ran" (nothing was graded); everything else as its status says."""
    if submission.mode == Mode.RUN and submission.status == Status.PASSED:
        return _("Ran")
    return status_label(submission.status)


def when(moment: datetime, now: datetime | None = None) -> str:
    """"3 minutes ago", in the page's language."""
    delta = aware(moment) - (now or utcnow())
    if abs(delta.total_seconds()) < 45:
        return _("just now")
    return format_timedelta(delta, add_direction=True, locale=locale_name(current_lang()))


_CODE_SPAN = re.compile(r"`([^`]+)`")


def inline_code(text: str) -> Markup:
    """Plain text (a hint) with its `code spans` shown as code; everything else escaped."""
    return Markup(_CODE_SPAN.sub(lambda m: f"<code>{m.group(1)}</code>", str(escape(text))))


def iso(moment: datetime) -> str:
    return aware(moment).isoformat()


def install(env: Environment) -> None:
    env.globals.update(outcome_label=outcome_label, when=when, iso=iso)
    env.filters["inline_code"] = inline_code
