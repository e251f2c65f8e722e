"""Every query on the draft tables; all scoped by tenant."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from service.cursors import CursorCodec
from service.drafts.models import (
    FINAL_STATUSES,
    OPEN_STATUSES,
    Draft,
    DraftRevision,
    DraftStatus,
    IdempotencyKey,
)
from service.errors import invalid_argument
from service.sql import insert_or_ignore


def get(session: Session, tenant: str, draft_id: str, *, for_update: bool = False) -> Draft | None:
    statement = select(Draft).where(col(Draft.id) == draft_id, col(Draft.tenant) == tenant)
    if for_update:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


def by_open_dedupe_key(session: Session, dedupe_key: str) -> Draft | None:
    statement = select(Draft).where(col(Draft.open_dedupe_key) == dedupe_key)
    return session.exec(statement).one_or_none()


def insert_draft_unless_duplicate(session: Session, draft: Draft) -> bool:
    """Insert a new draft unless an open identical one holds its dedupe key; True if inserted."""
    return insert_or_ignore(session, Draft.__table__, draft.model_dump())  # type: ignore[attr-defined]


def add_revision(session: Session, revision: DraftRevision) -> None:
    session.add(revision)


def revisions(session: Session, draft_id: str) -> list[DraftRevision]:
    statement = (
        select(DraftRevision)
        .where(col(DraftRevision.draft_id) == draft_id)
        .order_by(col(DraftRevision.revision))
    )
    return list(session.exec(statement).all())


def claim_idempotency_key(
    session: Session, key: IdempotencyKey, *, now: datetime
) -> IdempotencyKey | None:
    """Claim a key atomically. Returns None if claimed, else the live claim that holds it.

    An expired claim is removed first, so a key can be reused after the retention period.
    (Removed only when it is in the way: the sweeper forgets the others.)
    """
    scope = (
        col(IdempotencyKey.tenant) == key.tenant,
        col(IdempotencyKey.agent) == key.agent,
        col(IdempotencyKey.on_behalf_of) == key.on_behalf_of,
        col(IdempotencyKey.action) == key.action,
        col(IdempotencyKey.key) == key.key,
    )
    table = IdempotencyKey.__table__  # type: ignore[attr-defined]
    if insert_or_ignore(session, table, key.model_dump()):
        return None
    held_statement = select(IdempotencyKey).where(*scope).execution_options(populate_existing=True)
    held = session.exec(held_statement).one()
    if held.expires_at >= now:
        return held
    session.execute(delete(IdempotencyKey).where(*scope, col(IdempotencyKey.expires_at) < now))
    if insert_or_ignore(session, table, key.model_dump()):
        return None
    return session.exec(held_statement).one()  # a concurrent claim took the key first


def delete_expired_idempotency_keys(session: Session, *, now: datetime) -> int:
    """Forget every key past its retention (the sweeper's job); how many were removed."""
    result = session.execute(delete(IdempotencyKey).where(col(IdempotencyKey.expires_at) < now))
    return int(getattr(result, "rowcount", 0) or 0)


def repoint_idempotency_key(session: Session, key: IdempotencyKey, draft_id: str) -> None:
    claim = session.get(
        IdempotencyKey, (key.tenant, key.agent, key.on_behalf_of, key.action, key.key)
    )
    assert claim is not None, "repointing a key this unit of work just claimed"
    claim.draft_id = draft_id
    session.add(claim)


def open_past_expiry(
    session: Session, now: datetime, *, tenant: str | None = None, limit: int = 500
) -> list[Draft]:
    """Open drafts whose ``expires_at`` has passed (to be marked expired)."""
    statement = select(Draft).where(
        col(Draft.status).in_(["proposed", "approved"]), col(Draft.expires_at) <= now
    )
    if tenant is not None:
        statement = statement.where(col(Draft.tenant) == tenant)
    statement = statement.order_by(col(Draft.expires_at)).limit(limit)
    return list(session.exec(statement).all())


def page(
    session: Session,
    tenant: str,
    *,
    status: str | None,
    action: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
    now: datetime,
    since: datetime | None = None,
    among: Collection[str] | None = None,
) -> list[Draft]:
    """Newest first, keyset-paginated on (created_at, id) so pages stay stable under inserts.

    ``status`` is the status as read at ``now``: an open draft past its time is expired.
    ``since``: created then or later; ``among``: only these ids."""
    statement = select(Draft).where(col(Draft.tenant) == tenant)
    if since is not None:
        statement = statement.where(col(Draft.created_at) >= since)
    if among is not None:
        statement = statement.where(col(Draft.id).in_(sorted(among)))
    is_open = col(Draft.status).in_([s.value for s in OPEN_STATUSES])
    if status == DraftStatus.EXPIRED:
        past = col(Draft.expires_at) <= now
        statement = statement.where((col(Draft.status) == status) | (is_open & past))
    elif status is not None:
        statement = statement.where(col(Draft.status) == status)
        if status in OPEN_STATUSES:
            statement = statement.where(col(Draft.expires_at) > now)
    if action is not None:
        statement = statement.where(col(Draft.action) == action)
    return _newest_first(session, statement, after=after, limit=limit)


def unfinished_page(
    session: Session,
    tenant: str,
    *,
    proposed_by: str,
    on_behalf_of: str | None,
    after: tuple[datetime, str] | None,
    limit: int,
    now: datetime,
) -> list[Draft]:
    """One agent's drafts for one end user that have not ended yet (open and not past their
    time, or queued or running), newest first like ``page``."""
    unfinished = [s.value for s in DraftStatus if s not in FINAL_STATUSES]
    statement = select(Draft).where(
        col(Draft.tenant) == tenant,
        col(Draft.proposed_by) == proposed_by,
        col(Draft.on_behalf_of) == on_behalf_of
        if on_behalf_of is not None
        else col(Draft.on_behalf_of).is_(None),
        col(Draft.status).in_(unfinished),
        ~(col(Draft.status).in_([s.value for s in OPEN_STATUSES]) & (col(Draft.expires_at) <= now)),
    )
    return _newest_first(session, statement, after=after, limit=limit)


def newest_first_cursor(cursors: CursorCodec, kind: str, last: Draft) -> str:
    """The cursor of the page after ``last`` in a newest-first list (``kind``: which list)."""
    return cursors.encode(kind, [last.created_at.isoformat(), last.id])


def newest_first_after(cursors: CursorCodec, kind: str, cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) position a newest-first cursor of ``kind`` holds."""
    position = cursors.decode(kind, cursor)
    try:
        created_at, draft_id = position
        return datetime.fromisoformat(created_at), str(draft_id)
    except (TypeError, ValueError):  # pragma: no cover - the MAC says we wrote it
        raise invalid_argument("The cursor is not one this server returned.") from None


def _newest_first(
    session: Session, statement: Any, *, after: tuple[datetime, str] | None, limit: int
) -> list[Draft]:
    """Keyset pagination on (created_at, id), newest first: pages stay stable under inserts."""
    if after is not None:
        created_at, draft_id = after
        statement = statement.where(
            (col(Draft.created_at) < created_at)
            | ((col(Draft.created_at) == created_at) & (col(Draft.id) < draft_id))
        )
    statement = statement.order_by(col(Draft.created_at).desc(), col(Draft.id).desc()).limit(limit)
    return list(session.exec(statement).all())


def ids_traced(session: Session, tenant: str, trace_id: str) -> set[str]:
    """Drafts created or revised in the given trace."""
    created = select(Draft.id).where(col(Draft.tenant) == tenant, col(Draft.trace_id) == trace_id)
    revised = (
        select(DraftRevision.draft_id)
        .join(Draft, col(Draft.id) == col(DraftRevision.draft_id))
        .where(col(Draft.tenant) == tenant, col(DraftRevision.trace_id) == trace_id)
    )
    return set(session.exec(created).all()) | set(session.exec(revised).all())


# Drafts that count towards their peers' cumulative amount: everything that may still be, or
# was, carried out (not rejected, expired or failed).
COUNTED = (
    DraftStatus.PROPOSED,
    DraftStatus.APPROVED,
    DraftStatus.QUEUED,
    DraftStatus.RUNNING,
    DraftStatus.SUCCEEDED,
)


@dataclass(frozen=True)
class PeerWindow:
    """Which peers of one draft add up: the same tenant, action, policy key and currency,
    created in ``[since, before)`` (``before`` None: up to now), never the draft itself."""

    tenant: str
    action: str
    policy_key: str
    currency: str
    since: datetime
    before: datetime | None
    exclude: str


def peers_amounts(session: Session, windows: Mapping[str, PeerWindow]) -> dict[str, int]:
    """The summed amount (minor units) of each window's peer drafts, by the window's key:
    one query per tenant for any number of windows (a queue page asks for one per line)."""
    totals = dict.fromkeys(windows, 0)
    for tenant in sorted({window.tenant for window in windows.values()}):
        mine = {key: window for key, window in windows.items() if window.tenant == tenant}
        peers = _peers(session, tenant, list(mine.values()))
        for key, window in mine.items():
            totals[key] = sum(
                amount
                for draft_id, created_at, amount in peers.get(
                    (window.action, window.policy_key, window.currency), []
                )
                if created_at >= window.since
                and (window.before is None or created_at < window.before)
                and draft_id != window.exclude
            )
    return totals


PeerGroup = tuple[str, str, str]  # action, policy key, currency


def _peers(
    session: Session, tenant: str, windows: list[PeerWindow]
) -> dict[PeerGroup, list[tuple[str, datetime, int]]]:
    """(draft id, created at, amount) of every draft that may be a peer in the windows."""
    statement = sa_select(
        col(Draft.id),
        col(Draft.action),
        col(Draft.policy_key),
        col(Draft.currency),
        col(Draft.created_at),
        col(Draft.amount_minor),
    ).where(
        col(Draft.tenant) == tenant,
        col(Draft.action).in_(sorted({w.action for w in windows})),
        col(Draft.policy_key).in_(sorted({w.policy_key for w in windows})),
        col(Draft.created_at) >= min(w.since for w in windows),
        col(Draft.status).in_(COUNTED),
    )
    peers: dict[PeerGroup, list[tuple[str, datetime, int]]] = {}
    for draft_id, action, policy_key, currency, created_at, amount in session.execute(statement):
        peers.setdefault((action, policy_key, currency), []).append(
            (draft_id, created_at, amount or 0)
        )
    return peers


# Drafts that may still change their source: open, or on their way to execution.
PENDING_ON_SOURCE = (
    DraftStatus.PROPOSED,
    DraftStatus.APPROVED,
    DraftStatus.QUEUED,
    DraftStatus.RUNNING,
)


def _pending_on(tenant: str, source_ref: str, now: datetime) -> list[Any]:
    return [
        col(Draft.tenant) == tenant,
        col(Draft.source_ref) == source_ref,
        col(Draft.status).in_([s.value for s in PENDING_ON_SOURCE]),
        # An open draft past its time is expired for every reader; one on its way to
        # execution is not (its execution has its own deadline).
        or_(
            col(Draft.status).not_in([s.value for s in OPEN_STATUSES]),
            col(Draft.expires_at) > now,
        ),
    ]


def pending_on_source(
    session: Session,
    tenant: str,
    source_ref: str,
    *,
    now: datetime,
    excluding: str,
    limit: int = 50,
) -> list[Draft]:
    """The first ``limit`` other drafts (not ``excluding``) on this source that may still
    change it, oldest first (expired ones excluded even before the sweeper records them)."""
    statement = (
        select(Draft)
        .where(*_pending_on(tenant, source_ref, now), col(Draft.id) != excluding)
        .order_by(col(Draft.created_at), col(Draft.id))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def pending_totals(
    session: Session,
    tenant: str,
    source_ref: str,
    *,
    currency: str | None,
    now: datetime,
    excluding: str,
) -> tuple[int, int]:
    """How many other drafts on this source (not ``excluding``) may still change it, and
    their amounts in ``currency`` added up: every one of them, however many (the list above
    shows only the first)."""
    amount = func.coalesce(
        func.sum(case((col(Draft.currency) == currency, col(Draft.amount_minor)), else_=0)), 0
    )
    statement = sa_select(func.count(), amount).where(
        *_pending_on(tenant, source_ref, now), col(Draft.id) != excluding
    )
    count, total = session.execute(statement).one()
    return int(count), int(total)


def created_since(
    session: Session, since: datetime, *, tenant: str | None, limit: int
) -> list[Draft]:
    """The drafts created at ``since`` or later (of one tenant, or all), oldest first."""
    statement = select(Draft).where(col(Draft.created_at) >= since)
    if tenant is not None:
        statement = statement.where(col(Draft.tenant) == tenant)
    statement = statement.order_by(col(Draft.created_at), col(Draft.id)).limit(limit)
    return list(session.exec(statement).all())
