"""Logging: one line per event, JSON in production, with the request id that follows a
submission from the web request that made it to the worker that graded it."""

import json
import logging
import re
import secrets
from contextvars import ContextVar
from datetime import UTC, datetime

_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
_VALID = re.compile(r"^[A-Za-z0-9._-]{8,64}$")


def new_request_id(offered: str | None = None) -> str:
    """The id a proxy sent (X-Request-ID) when it looks sane, else a fresh one; then current."""
    request_id = offered if offered and _VALID.match(offered) else secrets.token_hex(8)
    _request_id.set(request_id)
    return request_id


def bind(request_id: str | None) -> None:
    """Make `request_id` (a job's, in the worker) the current one for the logs that follow."""
    _request_id.set(request_id)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            record.request_id = _request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)  # set by _RequestIdFilter, not a LogRecord field
        if request_id:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup(fmt: str) -> None:
    """Route every logger (uvicorn's too) to one stderr handler in `fmt` (json | text)."""
    handler = logging.StreamHandler()
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per migration is noise
