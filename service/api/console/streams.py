"""The console's live updates, as server-sent events.

``GET /console/events``: ``event: draft`` with ``{"draft_id", "status", "type"}`` whenever
a draft of the tenant is proposed, revised, signed, approved, rejected, queued, executed,
failed or expires (from the audit log, polled every ``console_poll_seconds``; ``id`` is the
audit seq, so a reconnecting EventSource resumes with ``Last-Event-ID`` and misses nothing).
``GET /console/executions/{id}/events``: ``event: execution`` with ``{"status"}`` on each
change, until it is finished. Both end when the session does (sign-out, idle, revoked token:
an ``event: session`` says so first). A session holds a bounded number of streams per
process; a stream does not count as activity for the idle timeout.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Annotated

import anyio
from anyio import to_thread
from fastapi import APIRouter, Path, Request
from fastapi.responses import StreamingResponse
from sqlmodel import Session

from service.api.console.api import JsonRoute
from service.api.console.deps import COOKIE, Caller, ConsoleCaller, ReadUnit
from service.api.deps import RuntimeDep
from service.db import lookup_scope, read_scope, session_scope
from service.executions.models import ExecutionStatus
from service.executions.schemas import EXECUTION_ID_PATTERN
from service.runtime import Runtime
from service.sessions import actions as sessions
from service.sessions import errors, feed
from service.sql import utcnow

router = APIRouter(prefix="/console", include_in_schema=False, route_class=JsonRoute)
KEEPALIVE_SECONDS = 15.0
SSE_HEADERS = {"X-Accel-Buffering": "no"}  # proxies must not buffer the stream


class StreamSlots:
    """How many streams each session holds open in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()

    @contextmanager
    def hold(self, session_id: str, limit: int) -> Iterator[None]:
        with self._lock:
            if self._held[session_id] >= limit:
                raise errors.too_many_streams(limit)
            self._held[session_id] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[session_id] -= 1
                if self._held[session_id] <= 0:
                    del self._held[session_id]

    def check(self, session_id: str, limit: int) -> None:
        """Refuse a new stream now, while an HTTP status can still say so."""
        with self._lock:
            if self._held[session_id] >= limit:
                raise errors.too_many_streams(limit)

    def held(self, session_id: str) -> int:
        with self._lock:
            return self._held[session_id]


SLOTS = StreamSlots()


def _alive(runtime: Runtime, secret: str) -> bool:
    """Whether the stream's session still lives; a death found here is recorded (audited)."""
    now = utcnow()
    with lookup_scope(runtime.engine) as session:
        verdict = sessions.check(
            session, secret, now=now, idle_seconds=runtime.settings.console_idle_timeout_seconds
        )
    if verdict.ending is not None and verdict.session_id is not None:
        with session_scope(runtime.engine) as session:
            sessions.end(session, verdict.session_id, reason=verdict.ending, now=now)
    return verdict.principal is not None


def _event(name: str, data: dict[str, str], *, id: int | None = None) -> str:
    lines = [f"event: {name}"]
    if id is not None:
        lines.append(f"id: {id}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return "\n".join(lines) + "\n\n"


def _start(request: Request, session: Session, caller: ConsoleCaller) -> int:
    head = feed.head(session, caller.principal)
    resume = request.headers.get("last-event-id", "")
    if re.fullmatch(r"[0-9]{1,18}", resume):  # ASCII digits only ("²".isdigit() is True)
        return min(int(resume), head)
    return head


@router.get("/events", name="console.events")
async def draft_events(
    request: Request, session: ReadUnit, runtime: RuntimeDep, caller: Caller
) -> StreamingResponse:
    """Live updates of the tenant's drafts for the inbox."""
    # The start is read in the request's unit (a refusal is audited); the polls each in a
    # snapshot of their own, after the unit has ended.
    after = await to_thread.run_sync(_start, request, session, caller)
    limit = runtime.settings.console_streams_per_session
    SLOTS.check(caller.session_id, limit)  # refused (409) before the stream starts

    def poll(after_seq: int) -> tuple[list[feed.DraftChange], int]:
        with read_scope(runtime.engine) as snapshot:
            return feed.draft_changes(snapshot, caller.principal, after_seq=after_seq)

    async def stream() -> AsyncIterator[str]:
        nonlocal after
        # The slot is held while the generator runs: however the stream ends (the client
        # goes, the session ends), leaving the generator releases it.
        with SLOTS.hold(caller.session_id, limit):
            yield "retry: 2000\n\n"
            quiet = 0.0
            while True:
                await anyio.sleep(runtime.settings.console_poll_seconds)
                if not await to_thread.run_sync(_alive, runtime, caller.secret):
                    yield _event("session", {"status": "ended"})
                    return
                changes, after = await to_thread.run_sync(poll, after)
                for change in changes:
                    yield _event("draft", change.as_json(), id=change.seq)
                quiet = 0.0 if changes else quiet + runtime.settings.console_poll_seconds
                if quiet >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield ": keepalive\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/executions/{execution_id}/events", name="console.execution.events")
async def execution_events(
    execution_id: Annotated[str, Path(pattern=EXECUTION_ID_PATTERN)],
    session: ReadUnit,
    runtime: RuntimeDep,
    caller: Caller,
) -> StreamingResponse:
    """One execution's status, on each change, until it is finished."""

    def status() -> ExecutionStatus:
        with read_scope(runtime.engine) as snapshot:
            return feed.execution_status(snapshot, caller.principal, execution_id)

    # Refused here (404, audited by the unit) before the stream starts.
    first = await to_thread.run_sync(feed.execution_status, session, caller.principal, execution_id)
    limit = runtime.settings.console_streams_per_session
    SLOTS.check(caller.session_id, limit)

    async def stream() -> AsyncIterator[str]:
        with SLOTS.hold(caller.session_id, limit):
            yield "retry: 2000\n\n"
            current = first
            yield _event("execution", {"status": current.value})
            while not feed.finished(current):
                await anyio.sleep(runtime.settings.console_poll_seconds)
                if not await to_thread.run_sync(_alive, runtime, caller.secret):
                    yield _event("session", {"status": "ended"})
                    return
                now = await to_thread.run_sync(status)
                if now is not current:
                    current = now
                    yield _event("execution", {"status": current.value})

    return StreamingResponse(stream(), media_type="text/event-stream", headers=SSE_HEADERS)


__all__ = ["COOKIE", "SLOTS", "router"]
