"""How much one web process takes on at once, all derived from TREINO_WEB_CONCURRENCY, and the
answer past it: a quick 503 with Retry-After instead of a wait nobody can see the end of.

Each request the app works on holds at most one worker thread and one database connection at a
time (the credentials' lookup, then the route, then its commit, one after the other), so with
no more requests inside than there are threads and pooled connections, nothing inside waits for
either. The rest wait here, on the event loop, where waiting costs nothing and holds nothing:
reads first (a page, a poll), then writes in the order they came; a request that would wait
past PATIENCE at the pace places are freed, or finds the waiting room full, is answered 503 at
once, with a Retry-After of when those waiting should be in.
"""

import asyncio
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.errors import busy_response
from app.middleware import early_request
from app.security import SAFE_METHODS

# Requests past the ones inside that may wait for a place, per place inside: a class pressing
# Submit together waits its turn rather than being turned away (at the default 8 inside, a
# class of 100 fits; PATIENCE, not this, refuses those the process could not serve in time).
WAITING_PER_PLACE = 16
PATIENCE = 2.0  # seconds a request may wait for a place; one that would wait longer is refused
RETRY_AFTER_MAX = 30  # seconds: the most a 503 asks a client to wait before sending again
PACE_ROUNDS = 2  # the pace is measured over the last PACE_ROUNDS × C places freed
# Answered whatever the load, and without an account lookup (app/accounts/auth.py): the
# liveness probe (a busy process is alive), static files, and a page's wait for its submission's
# status (seconds long, on the event loop: inside, a class's waits would fill every place).
UNGATED = ("/healthz", "/static/", "/live/")


@dataclass(frozen=True)
class Sizes:
    """Every size that matters to one web process, from TREINO_WEB_CONCURRENCY."""

    concurrency: int

    @property
    def threads(self) -> int:
        """Worker threads for sync routes and dependencies: one per request inside."""
        return self.concurrency

    @property
    def connections(self) -> int:
        """Database connections per pool (writes, and GET reads): one per request inside, so a
        checkout never waits. The process holds at most twice this open."""
        return self.concurrency

    @property
    def waiting(self) -> int:
        """Requests that may wait for a place before more are answered 503 at once."""
        return self.concurrency * WAITING_PER_PLACE


def server_options(seconds: float) -> dict[str, Any]:
    """uvicorn's options for a web process (`treino serve`): HTTP/1.1 whose request headers must
    arrive within `seconds` (TREINO_REQUEST_SECONDS), as Body (app/middleware.py) asks of bodies.
    Headers hold no place (nothing inside runs before their end), only a socket: this bounds how
    long. (Their size is uvicorn's bound: 16 KB.)"""

    class Protocol(_HeadersInTime):
        header_seconds = seconds

    return {"http": Protocol}


class _HeadersInTime(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers, counted from the
    connection's start or the previous response's end: past it, 408 and the connection closes.
    (uvicorn's own keep-alive timeout closes a connection where nothing at all came, sooner; a
    byte resets it, and headers sent a byte at a time would never end.)"""

    header_seconds = 20.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._headers_due()

    def on_response_complete(self) -> None:
        done = self.cycle
        super().on_response_complete()
        self._headers_due(done)

    def _headers_due(self, last: Any = None) -> None:
        self.loop.call_later(self.header_seconds, self._headers_late, last)

    def _headers_late(self, last: Any) -> None:
        """No request has begun since `last` ended (or the connection opened): its headers are late."""
        if self.cycle is not last or self.transport.is_closing():
            return
        body = b"The request's headers took too long to arrive.\n"
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.transport.close()


def use_threads(sizes: Sizes) -> None:
    """Size the thread pool that runs sync routes (Starlette's default: 40). Call on the loop."""
    to_thread.current_default_thread_limiter().total_tokens = sizes.threads


@dataclass(eq=False)
class _Waiter:
    place: asyncio.Future[bool]  # True: let in; False: refused
    deadline: float


class Gate:
    """ASGI middleware: at most ``sizes.concurrency`` requests inside and ``sizes.waiting`` more
    waiting, reads ahead of writes. A request is refused (503, Retry-After) when the room is
    full or when, at the pace places are freed, it would wait past PATIENCE; those at the back
    are refused as soon as that is known, not when their patience runs out."""

    def __init__(self, app: ASGIApp, sizes: Sizes) -> None:
        self.app = app
        self.free = sizes.concurrency
        self.room = sizes.waiting
        self.reads: deque[_Waiter] = deque()
        self.writes: deque[_Waiter] = deque()
        self.pace = 0.0  # seconds between places freed while requests wait (0: not known yet)
        # when the last places were freed while requests wait, two rounds of those inside: the
        # pace is known from then on. Requests let in together leave close together, so an
        # interval alone says little, and a process's first requests are its slowest (each
        # statement compiled once): that, or counting from a request's arrival to the first
        # place freed (how long one request takes inside, C times the pace), sent half a class
        # away (issue 26). Until then waiting is bounded by PATIENCE alone.
        self.freed: deque[float] = deque(maxlen=PACE_ROUNDS * sizes.concurrency + 1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(UNGATED):
            await self.app(scope, receive, send)
            return
        if not await self._enter(scope["method"] in SAFE_METHODS):
            await busy_response(early_request(scope, receive), self.retry_after())(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._leave()

    @property
    def waiting(self) -> int:
        return len(self.reads) + len(self.writes)

    def retry_after(self) -> int:
        """Seconds until the requests waiting now should have been let in."""
        return max(1, min(RETRY_AFTER_MAX, math.ceil(self.waiting * self.pace)))

    async def _enter(self, read: bool) -> bool:
        """Whether the request was let in (it then holds a place until _leave)."""
        if self.free:
            self.free -= 1
            return True
        if self.waiting >= self.room or (self.waiting + 1) * self.pace > PATIENCE:
            return False
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), loop.time() + PATIENCE)
        queue = self.reads if read else self.writes
        queue.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.place), PATIENCE)
        except TimeoutError:
            if waiter.place.done():  # let in or refused as the time ran out
                return waiter.place.result()
            queue.remove(waiter)
            return False
        except asyncio.CancelledError:
            if not waiter.place.done():
                queue.remove(waiter)
            elif waiter.place.result():  # let in as it was cancelled: the place goes on
                self._leave()
            raise

    def _leave(self) -> None:
        """Hand the place to the first waiting read, else the first write, else free it; then
        refuse those at the back who, at this pace, would be let in only past their patience."""
        queue = self.reads or self.writes
        if not queue:
            self.free += 1
            self.freed.clear()
            return
        now = asyncio.get_running_loop().time()
        self.freed.append(now)
        if len(self.freed) == self.freed.maxlen:  # one interval is not a pace, nor is one round
            self.pace = (now - self.freed[0]) / (len(self.freed) - 1)
        queue.popleft().place.set_result(True)
        while self.writes and now + self.waiting * self.pace > self.writes[-1].deadline:
            self.writes.pop().place.set_result(False)
        while self.reads and now + len(self.reads) * self.pace > self.reads[-1].deadline:
            self.reads.pop().place.set_result(False)
