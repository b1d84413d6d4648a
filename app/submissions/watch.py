"""Waiting for a submission's status to change, on the event loop, holding no thread and no
database connection per waiter.

One watcher per web process reads, in one query, the status of every submission someone is
waiting for, and wakes those whose status is no longer the one they saw. On PostgreSQL it reads
when the status trigger's NOTIFY comes (app/submissions/queue.py; one listening connection for the whole
process) and every SAFETY_SECONDS besides; on SQLite when the database's files were written
(``queue.Written``, looked at every ``WRITTEN_SECONDS``) and every SAFETY_SECONDS besides; where
there is neither (a database in memory, a listener that failed) every TICK_SECONDS. The row
stays the truth: a notification lost while the listener reconnects only delays a verdict, never
loses it.
The watcher runs while someone waits and stops when no one does.
"""

import asyncio
import contextlib
import hashlib
import hmac
import logging

from anyio import CapacityLimiter, to_thread
from sqlalchemy import select
from sqlalchemy.engine import Engine, make_url

from app.config import Settings
from app.db import make_engine
from app.submissions.models import Submission
from app.submissions.queue import CHANNEL, WRITTEN_SECONDS, Written

TICK_SECONDS = 0.1
SAFETY_SECONDS = 2.0

log = logging.getLogger(__name__)


def key(settings: Settings, submission_id: int) -> str:
    """The proof, in a wait URL, that its page showed this submission: waiting needs no account
    lookup and no read of the row, yet no one learns when another learner's status changes."""
    secret = settings.secret_key.get_secret_value().encode()
    return hmac.new(secret, f"wait:{submission_id}".encode(), hashlib.sha256).hexdigest()[:32]


def valid(settings: Settings, submission_id: int, given: str) -> bool:
    return hmac.compare_digest(key(settings, submission_id), given)


class Watch:
    def __init__(self, database_url: str) -> None:
        self.url = make_url(database_url)
        self.waiting: dict[int, list[tuple[str, asyncio.Future[str | None]]]] = {}
        self._engine: Engine | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    async def changed(self, submission_id: int, seen: str, timeout: float) -> str | None:
        """The submission's status once it is no longer ``seen`` (None when the row is gone);
        ``seen`` itself after ``timeout`` seconds without a change."""
        loop = asyncio.get_running_loop()
        entry = (seen, loop.create_future())
        self.waiting.setdefault(submission_id, []).append(entry)
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())
        self._wake.set()  # read at once: the status may have changed before this wait began
        try:
            return await asyncio.wait_for(entry[1], timeout)
        except TimeoutError:
            return seen
        finally:
            waiters = self.waiting.get(submission_id, [])
            if entry in waiters:
                waiters.remove(entry)
            if not waiters:
                self.waiting.pop(submission_id, None)

    def close(self) -> None:
        """Close the watcher's own connection (the process's end; a test's)."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    async def _run(self) -> None:
        thread = CapacityLimiter(1)  # one read at a time, on a thread beside the routes' ones
        listener = None
        if self.url.get_backend_name() == "postgresql":
            listener = asyncio.get_running_loop().create_task(self._listen())
        written = Written.of(self.url) if listener is None else None
        try:
            while self.waiting:
                listening = listener is not None and not listener.done()
                if written is not None:
                    await self._look(written)
                else:
                    tick = SAFETY_SECONDS if listening else TICK_SECONDS
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), tick)
                self._wake.clear()
                try:
                    ids = list(self.waiting)
                    statuses = await to_thread.run_sync(self._statuses, ids, limiter=thread)
                except Exception:  # the database away for a moment: read again at the next tick
                    log.warning("could not read the statuses waited for", exc_info=True)
                    await asyncio.sleep(SAFETY_SECONDS)
                    continue
                for submission_id, waiters in self.waiting.items():
                    if submission_id not in ids:  # began waiting while this read ran: next read
                        continue
                    status = statuses.get(submission_id)  # None: the row is gone
                    for seen, future in waiters:
                        if status != seen and not future.done():
                            future.set_result(status)
        finally:
            if listener is not None:
                listener.cancel()

    async def _look(self, written: Written) -> None:
        """Until the database's files were written, a new waiter came, or SAFETY_SECONDS passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SAFETY_SECONDS
        while not written.changed() and not self._wake.is_set() and loop.time() < deadline:
            await asyncio.sleep(WRITTEN_SECONDS)  # a sleep, not a task per look

    def _statuses(self, ids: list[int]) -> dict[int, str]:
        if self._engine is None:  # its own connection: never one a route is waiting for
            self._engine = make_engine(
                self.url.render_as_string(hide_password=False),
                pool_size=1,
                max_overflow=0,
                isolation_level="AUTOCOMMIT",
            )
        with self._engine.connect() as conn:
            rows = conn.execute(select(Submission.id, Submission.status).where(Submission.id.in_(ids)))
            return {row.id: row.status for row in rows}

    async def _listen(self) -> None:
        """Wake the reader at each NOTIFY; if the connection fails, the reader goes back to ticks."""
        import psycopg

        conninfo = self.url.set(drivername="postgresql").render_as_string(hide_password=False)
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                self._wake.set()  # read once listening: a change before LISTEN sent nothing here
                async for _ in conn.notifies():
                    self._wake.set()
        except psycopg.Error:
            log.warning("not listening for status changes; reading every %s s", TICK_SECONDS, exc_info=True)
            self._wake.set()
