"""What auditors read: filtered pages of events, full exports, verification, checkpoints."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Engine
from sqlmodel import Session

from service.audit import actions, checkpoints, repository
from service.audit.chain import hash_body
from service.audit.health import anchoring_problem
from service.audit.models import AuditEvent
from service.audit.schemas import MAX_PAGE, CheckpointList, EventFilter, EventPage, EventView
from service.audit.verification import Verification
from service.config import Settings
from service.cursors import CursorCodec
from service.db import read_scope
from service.principal import Principal, Role
from service.signing import key_id_for

CURSOR_KIND = "audit.events"


def list_events(
    session: Session,
    principal: Principal,
    filters: EventFilter,
    *,
    cursors: CursorCodec,
    cursor: str | None,
    limit: int,
) -> EventPage:
    principal.require(Role.AUDITOR)
    limit = max(1, min(limit, MAX_PAGE))
    after = _after_seq(cursors, cursor) if cursor else 0
    rows = repository.page(session, principal.tenant, filters, after_seq=after, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return EventPage(
        events=[_view(event) for event in rows],
        next_cursor=cursors.encode(CURSOR_KIND, [rows[-1].seq]) if more else None,
    )


def export_lines(engine: Engine, tenant: str, filters: EventFilter) -> Iterator[str]:
    """NDJSON, one event per line, oldest first, in one consistent snapshot, constant memory.

    Call only after the caller's right to export was checked (``authorize_export``).
    """
    with read_scope(engine) as session:
        for event in repository.stream(session, tenant, filters):
            yield _view(event).model_dump_json() + "\n"


def authorize_export(session: Session, principal: Principal, filters: EventFilter) -> EventFilter:
    """Check the right to export, leave a trace that an export happened, and return the
    filters the export must stream with.

    The export is bounded at the head as it was before its own ``audit.exported`` event
    (which the next export contains): the file is then a prefix of the chain, so a
    checkpoint signed just before the export covers all of it.
    """
    principal.require(Role.AUDITOR)
    through = repository.head_seq(session, principal.tenant)
    if filters.through_seq is not None:
        through = min(through, filters.through_seq)
    actions.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="audit.exported",
        data={"filters": filters.active(), "through_seq": through},
    )
    return filters.model_copy(update={"through_seq": through})


def verify(
    session: Session, principal: Principal, settings: Settings, *, now: datetime
) -> Verification:
    """Verify the caller's tenant; pass a ``read_scope`` session (one snapshot)."""
    principal.require(Role.AUDITOR)
    result = actions.verify(
        session, principal.tenant, checkpoint_public_key=checkpoints.trusted_public_key(settings)
    )
    return replace(
        result, checkpoint_problem=anchoring_problem(session, settings, principal.tenant, now=now)
    )


def list_checkpoints(session: Session, principal: Principal, settings: Settings) -> CheckpointList:
    principal.require(Role.AUDITOR)
    public_key = checkpoints.trusted_public_key(settings)
    return CheckpointList(
        tenant=principal.tenant,
        public_key=public_key,
        key_id=key_id_for(public_key) if public_key else None,
        checkpoints=[
            checkpoints.as_dict(c) for c in checkpoints.for_tenant(session, principal.tenant)
        ],
    )


def _view(event: AuditEvent) -> EventView:
    """An event exactly as hashed, plus its hash."""
    return EventView(**hash_body(event), hash=event.hash)


def _after_seq(cursors: CursorCodec, cursor: str) -> int:
    (after,) = cursors.decode(CURSOR_KIND, cursor)
    return int(after)
