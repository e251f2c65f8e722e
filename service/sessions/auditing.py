"""The console for auditors: the audit log a page at a time, the chain's state, and one
draft's timeline with the agent's calls of the same conversation (issue 20.6).

Auditors only, and only their tenant: every query here is scoped by the principal's tenant,
so another tenant's auditor finds none of it (an id from elsewhere answers as unknown).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.audit import checkpoints, review
from service.audit import repository as audit_repository
from service.audit.models import AuditEvent
from service.audit.schemas import EventFilter
from service.audit.traces import describe
from service.config import Settings
from service.cursors import CursorCodec
from service.drafts import repository as drafts_repository
from service.drafts.errors import draft_unavailable
from service.drafts.models import Draft, DraftRevision
from service.principal import Principal, Role
from service.sql import rfc3339

PAGE_SIZE = 50
CURSOR_KIND = "console.audit"
# The agent's calls before and after a draft's revisions that belong to its conversation
# when they carry another trace id: same agent, same end user, within this window.
CONVERSATION_WINDOW = timedelta(minutes=30)
MAX_TIMELINE = 300


@dataclass(frozen=True)
class Line:
    seq: int
    at: str
    actor: str
    type: str
    draft_id: str | None
    execution_id: str | None
    trace_id: str | None
    description: str
    how: str = ""  # on a timeline: why this event belongs to the draft


@dataclass(frozen=True)
class LogPage:
    lines: list[Line]
    next_cursor: str | None


def _line(event: AuditEvent, how: str = "") -> Line:
    return Line(
        seq=event.seq,
        at=rfc3339(event.at),
        actor=event.actor,
        type=event.type,
        draft_id=event.draft_id,
        execution_id=event.execution_id,
        trace_id=event.trace_id,
        description=describe(event),
        how=how,
    )


def log_page(
    session: Session,
    principal: Principal,
    filters: EventFilter,
    *,
    cursors: CursorCodec,
    cursor: str | None,
) -> LogPage:
    """The tenant's events matching ``filters``, newest first, a page at a time."""
    principal.require(Role.AUDITOR)
    before = int(cursors.decode(CURSOR_KIND, cursor)[0]) if cursor else None
    events = audit_repository.page_newest_first(
        session, principal.tenant, filters, before_seq=before, limit=PAGE_SIZE + 1
    )
    more, events = len(events) > PAGE_SIZE, events[:PAGE_SIZE]
    return LogPage(
        lines=[_line(event) for event in events],
        next_cursor=cursors.encode(CURSOR_KIND, [events[-1].seq]) if more else None,
    )


@dataclass(frozen=True)
class ChainState:
    report: dict[str, Any]  # docs/audit.md: GET /v1/audit/verify
    latest_checkpoint: dict[str, Any] | None


def chain_state(
    session: Session, principal: Principal, settings: Settings, *, now: datetime
) -> ChainState:
    """The tenant's chain verified now (pass a read scope: one snapshot), and its latest
    signed checkpoint."""
    verification = review.verify(session, principal, settings, now=now)
    latest = checkpoints.latest_for(session, principal.tenant)
    return ChainState(
        report=verification.report(),
        latest_checkpoint=checkpoints.as_dict(latest) if latest is not None else None,
    )


@dataclass(frozen=True)
class Timeline:
    draft_id: str
    action: str
    status: str
    on_behalf_of: str | None
    proposed_by: str
    lines: list[Line]
    window_minutes: int
    truncated: bool = False  # more lines belong here than are shown


def draft_timeline(session: Session, principal: Principal, draft_id: str) -> Timeline:
    """Everything the log holds about one draft, in chain order: its own events (proposal,
    revisions, decisions, executions), the agent's tool calls under the traces that proposed
    it, and the agent's calls for the same end user within ``CONVERSATION_WINDOW`` of one of
    its revisions under other trace ids (a read before the proposal often has its own). Each
    line says which of the three it is."""
    principal.require(Role.AUDITOR)
    tenant = principal.tenant
    draft = drafts_repository.get(session, tenant, draft_id)
    if draft is None:
        raise draft_unavailable()
    revisions = drafts_repository.revisions(session, draft.id)
    found: dict[int, Line] = {}
    for event in audit_repository.events_for(session, tenant, draft_id=draft.id):
        found[event.seq] = _line(event, "this draft")
    full = _conversation(session, draft, revisions, found)
    lines = [found[seq] for seq in sorted(found)]
    return Timeline(
        draft_id=draft.id,
        action=draft.action,
        status=draft.status.value,
        on_behalf_of=draft.on_behalf_of,
        proposed_by=draft.proposed_by,
        lines=lines[:MAX_TIMELINE],
        window_minutes=int(CONVERSATION_WINDOW.total_seconds() // 60),
        truncated=full or len(lines) > MAX_TIMELINE,
    )


def _conversation(
    session: Session, draft: Draft, revisions: list[DraftRevision], found: dict[int, Line]
) -> bool:
    """Add the proposing agent's calls of the draft's conversation to ``found``; True if a
    query came back full (the timeline may then miss some: the log's filters find them)."""
    tenant, agent = draft.tenant, f"{Role.AGENT.value}:{draft.proposed_by}"
    traces = {r.trace_id for r in revisions if r.trace_id} | (
        {draft.trace_id} if draft.trace_id else set()
    )
    in_traces = audit_repository.tool_calls_in_traces(
        session, tenant, traces, actor=agent, limit=MAX_TIMELINE
    )
    full = len(in_traces) >= MAX_TIMELINE
    for event in in_traces:
        # A trace id is the caller's choice: the same agent acting for another end user
        # under it is not this conversation (events before round 3 name no end user).
        if event.data.get("on_behalf_of", draft.on_behalf_of) == draft.on_behalf_of:
            found.setdefault(event.seq, _line(event, "same trace"))
    if not draft.on_behalf_of:
        return full
    for moment in sorted({r.created_at for r in revisions} or {draft.created_at}):
        nearby = audit_repository.tool_calls_between(
            session,
            tenant,
            agent,
            since=moment - CONVERSATION_WINDOW,
            until=moment + CONVERSATION_WINDOW,
            limit=MAX_TIMELINE,
        )
        full = full or len(nearby) >= MAX_TIMELINE
        for event in nearby:
            if event.data.get("on_behalf_of") == draft.on_behalf_of:
                found.setdefault(event.seq, _line(event, "same agent and end user, nearby"))
    return full
