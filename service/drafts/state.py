"""The one owner of a draft row (DESIGN.md §3): its creation, its revisions, its status.

A new draft is made by ``proposed`` (revision 1, its contract version, its open dedupe
key), a new revision by ``revise``, and every change of status goes through ``transition``,
which knows the allowed moves, keeps ``open_dedupe_key`` and ``updated_at`` right, and
records the ``draft.<status>`` audit event in the same unit of work. Nothing else writes the
columns tests/test_row_owners.py guards.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.canonical import canonical_json, sha256_hex
from service.drafts.models import OPEN_STATUSES, Draft, DraftStatus
from service.principal import Principal
from service.row_owners import ROW_OWNERS

S = DraftStatus

# Where a draft may go from each status. Final statuses go nowhere.
TRANSITIONS: dict[DraftStatus, frozenset[DraftStatus]] = {
    # PROPOSED -> WITHDRAWN: the agent that proposed it took it back (tasks/cancel) before a
    # quorum approved it; once approved, only an approver's rejection stops it.
    S.PROPOSED: frozenset({S.APPROVED, S.REJECTED, S.EXPIRED, S.WITHDRAWN}),
    # APPROVED -> FAILED: the worker refused an execution whose draft was set to approved
    # behind draftgate's back (its approvals do not verify); it fails visibly.
    S.APPROVED: frozenset({S.QUEUED, S.REJECTED, S.EXPIRED, S.FAILED}),
    # A queued execution can be refused at claim time (its approvals do not verify), or
    # expire because it never started before its deadline.
    S.QUEUED: frozenset({S.RUNNING, S.FAILED, S.EXPIRED}),
    # A transient failure queues it again for a later attempt.
    S.RUNNING: frozenset({S.QUEUED, S.SUCCEEDED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
    S.WITHDRAWN: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A caller asked for a move the state machine does not allow: a bug, never user input."""


def dedupe_key(principal: Principal, action: str, params_sha256: str) -> str:
    """sha256(tenant, proposer, end user, action, params): one open draft per such key (a
    unique index makes it atomic), so an identical proposal returns the open one."""
    scope = [principal.tenant, principal.subject, principal.on_behalf_of, action, params_sha256]
    return sha256_hex(canonical_json(scope))


def proposed(
    draft_id: str,
    *,
    proposer: Principal,
    action: str,
    contract_version: int,
    fields: Mapping[str, Any],
    now: datetime,
    trace_id: str | None,
    idempotency_key: str | None,
) -> Draft:
    """A new draft at revision 1, proposed under ``contract_version`` and holding its open
    dedupe key; not yet inserted (repository.insert_draft_unless_duplicate)."""
    _check_fields(fields)
    return Draft(
        id=draft_id,
        tenant=proposer.tenant,
        action=action,
        contract_version=contract_version,
        revision=1,
        proposed_by=proposer.subject,
        on_behalf_of=proposer.on_behalf_of,
        trace_id=trace_id,
        idempotency_key=idempotency_key,
        status=DraftStatus.PROPOSED,
        open_dedupe_key=dedupe_key(proposer, action, str(fields["params_sha256"])),
        created_at=now,
        updated_at=now,
        **fields,
    )


def revise(
    session: Session,
    draft: Draft,
    *,
    proposer: Principal,
    contract_version: int,
    fields: Mapping[str, Any],
    now: datetime,
    trace_id: str | None,
    reason: str | None = None,
) -> None:
    """Make ``fields`` the proposed draft's next revision, under the action's current
    contract. Not a change of status (it stays proposed), but a new digest: every approval
    must be given anew. ``reason``: why it has a new revision when its proposer did not
    write it (an approver narrowed it); an earlier revision's reason no longer applies.
    Refuses a draft that is not proposed (a bug: the caller checks)."""
    if draft.status is not DraftStatus.PROPOSED:
        raise IllegalTransition(f"draft {draft.id}: {draft.status.value} cannot be revised")
    _check_fields(fields)
    for name, value in fields.items():
        setattr(draft, name, value)
    draft.contract_version = contract_version
    draft.revision += 1
    draft.status_reason = reason
    draft.open_dedupe_key = dedupe_key(proposer, draft.action, draft.params_sha256)
    draft.trace_id = trace_id or draft.trace_id
    draft.updated_at = now
    session.add(draft)
    session.flush()


# A draft whose source moved before it ran may go back to proposed at a new revision: while
# it waits for approval, once approved, or when its execution found the source moved.
REBASABLE = frozenset({S.PROPOSED, S.APPROVED, S.QUEUED, S.RUNNING})


def rebase(
    session: Session,
    draft: Draft,
    *,
    proposer: Principal,
    fields: Mapping[str, Any],
    now: datetime,
    reason: str,
) -> DraftStatus:
    """Bind the draft to its source's new state: the same change at a new revision, proposed
    again (earlier approvals were for the old revision and no longer count). Returns the
    status it left; the caller records the revision and its ``draft.rebased`` event, as for
    ``revise``. Not in TRANSITIONS on purpose: a new revision, not a step forward."""
    if draft.status not in REBASABLE:
        raise IllegalTransition(f"draft {draft.id}: {draft.status.value} cannot be rebased")
    _check_fields(fields)
    left = draft.status
    for name, value in fields.items():
        setattr(draft, name, value)
    draft.revision += 1
    draft.status = DraftStatus.PROPOSED
    draft.status_reason = reason
    draft.open_dedupe_key = dedupe_key(proposer, draft.action, draft.params_sha256)
    draft.updated_at = now
    session.add(draft)
    session.flush()
    return left


def _check_fields(fields: Mapping[str, Any]) -> None:
    """A proposal's content never carries the columns this module keeps itself."""
    owned = ROW_OWNERS["drafts"].columns & set(fields)
    if owned:
        raise ValueError(f"written by drafts.state only: {sorted(owned)}")


def allowed(current: DraftStatus, target: DraftStatus) -> bool:
    return target in TRANSITIONS[current]


def transition(
    session: Session,
    draft: Draft,
    target: DraftStatus,
    *,
    now: datetime,
    actor: str,
    trace_id: str | None = None,
    execution_id: str | None = None,
    reason: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Move ``draft`` to ``target`` and audit it as ``draft.<target>``; refuse illegal moves.

    ``execution_id`` names the execution that moved it (queued, running and after)."""
    current = draft.status
    if not allowed(current, target):
        raise IllegalTransition(f"draft {draft.id}: {current.value} -> {target.value}")
    draft.status = target
    draft.status_reason = reason
    draft.updated_at = now
    if target not in OPEN_STATUSES:
        # No longer open: an identical proposal from now on is a new draft.
        draft.open_dedupe_key = None
    session.add(draft)
    session.flush()
    audit.record(
        session,
        tenant=draft.tenant,
        actor=actor,
        type=f"draft.{target.value}",
        draft_id=draft.id,
        execution_id=execution_id,
        trace_id=trace_id,
        data={"from": current.value, "revision": draft.revision, "reason": reason, **(data or {})},
    )


EXPIRY_REASON = "it was not approved and executed before it expired"


def is_past_expiry(draft: Draft, now: datetime) -> bool:
    """Open, and its time is up: every reader treats it as expired, written or not."""
    return draft.status in OPEN_STATUSES and now >= draft.expires_at


def status_at(draft: Draft, now: datetime) -> DraftStatus:
    """The status a reader reports at ``now``. Reads never write (they run read-only), so an
    open draft past its time reads as expired until a writer or the sweeper records it."""
    return DraftStatus.EXPIRED if is_past_expiry(draft, now) else draft.status


def reason_at(draft: Draft, now: datetime) -> str | None:
    return EXPIRY_REASON if is_past_expiry(draft, now) else draft.status_reason


def expire_if_due(session: Session, draft: Draft, *, now: datetime) -> bool:
    """Mark an open draft past its ``expires_at`` as expired (deny by default). True if expired."""
    if draft.status is DraftStatus.EXPIRED:
        return True
    if not is_past_expiry(draft, now):
        return False
    transition(
        session,
        draft,
        DraftStatus.EXPIRED,
        now=now,
        actor="system:expiry",
        reason=EXPIRY_REASON,
        data={"expired_at": draft.expires_at.isoformat()},
    )
    return True
