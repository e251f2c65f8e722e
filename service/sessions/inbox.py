"""The console's inbox: the drafts a signed-in person may act on, sorted and filtered.

An approver's inbox holds the open drafts of their tenant they may still act on: never a
draft they proposed (or that was proposed on their behalf), never a proposed one whose
current revision they have already signed; approved ones wait for someone to execute them.
An auditor's holds every open draft (to watch, not to decide). Admins decide nothing and
have no inbox.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlmodel import Session

from service.approvals import progress
from service.approvals import repository as approvals_repository
from service.drafts import repository as drafts_repository
from service.drafts.models import OPEN_STATUSES, Draft, DraftStatus
from service.drafts.schemas import amount_of
from service.drafts.state import status_at
from service.money import AmountView, to_major
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sessions.signed import signed_view

# The most drafts an inbox shows; a larger queue is the API's to page through.
INBOX_LIMIT = 200
RISK_RANK = {"low": 0, "medium": 1, "high": 2}


class Sort(StrEnum):
    AGE = "age"
    AMOUNT = "amount"
    RISK = "risk"
    EXPIRY = "expiry"


class InboxStatus(StrEnum):
    """What an approver can act on: sign (proposed), execute or stop (approved); and the
    history: drafts decided already, all or by how they ended."""

    PROPOSED = "proposed"
    APPROVED = "approved"
    OPEN = "open"  # both
    DECIDED = "decided"  # every draft no longer waiting for a decision
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


# The history: every status past a decision, all together or one at a time.
DECIDED = [status for status in DraftStatus if status not in OPEN_STATUSES]
HISTORY: dict[InboxStatus, list[DraftStatus]] = {
    InboxStatus.DECIDED: DECIDED,
    # queued and running are in the history only together with the rest
    **{InboxStatus(s.value): [s] for s in DECIDED if s.value in set(InboxStatus)},
}


@dataclass(frozen=True)
class InboxItem:
    draft_id: str
    action: str
    status: DraftStatus
    revision: int
    summary: str
    amount: AmountView | None  # of the signed params, never the stored amount columns
    inconsistent: str | None  # why the stored draft disagrees with its params, or None
    risk: str
    progress: progress.ApprovalProgress  # as the execute gate counts it
    proposed_by: str
    on_behalf_of: str | None
    created_at: datetime
    expires_at: datetime


def inbox(
    session: Session,
    principal: Principal,
    *,
    runtime: Runtime,
    now: datetime,
    status: InboxStatus = InboxStatus.PROPOSED,
    action: str | None = None,
    sort: Sort = Sort.AGE,
    descending: bool = False,
    since: date | None = None,
    approver: str | None = None,
) -> list[InboxItem]:
    """The drafts ``principal`` may act on now, by default the oldest waiting first; or the
    history (``HISTORY``): every draft of the tenant that ended that way, whoever decided.
    ``since``: created on or after that day (UTC); ``approver``: that person signed a
    decision on it."""
    principal.require(Role.APPROVER, Role.AUDITOR)
    if status is InboxStatus.OPEN:
        statuses = [DraftStatus.PROPOSED, DraftStatus.APPROVED]
    else:
        statuses = HISTORY.get(status) or [DraftStatus(status.value)]
    start = datetime.combine(since, time.min, tzinfo=UTC) if since is not None else None
    among = (
        approvals_repository.decided_by(session, principal.tenant, approver, limit=INBOX_LIMIT)
        if approver
        else None
    )
    drafts: list[Draft] = []
    for wanted in statuses:
        drafts += drafts_repository.page(
            session,
            principal.tenant,
            status=wanted,
            action=action,
            after=None,
            limit=INBOX_LIMIT,
            now=now,
            since=start,
            among=among,
        )
    standings = progress.of_drafts(session, progress.Rules.of(runtime), drafts)
    if principal.role is Role.APPROVER and status not in HISTORY:
        drafts = [d for d in drafts if _decidable(d, standings[d.id].bar(principal.subject))]
    items = [_item(runtime, draft, standings[draft.id], now) for draft in drafts]
    items.sort(key=_sort_key(sort), reverse=descending)
    return items[:INBOX_LIMIT]


def _decidable(draft: Draft, bar: progress.Bar | None) -> bool:
    """Maker ≠ checker, and one signature per approver and revision (DESIGN.md §4). An
    approved draft stays in its approvers' inbox: it waits for one of them to execute it."""
    if bar is progress.Bar.PROPOSER:
        return False
    return bar is None or draft.status is not DraftStatus.PROPOSED


def _item(
    runtime: Runtime, draft: Draft, standing: progress.ApprovalProgress, now: datetime
) -> InboxItem:
    signed = signed_view(
        runtime.registry,
        action=draft.action,
        params=draft.params,
        stored_sha256=draft.params_sha256,
        stored_amount=amount_of(draft),
    )
    return InboxItem(
        draft_id=draft.id,
        action=draft.action,
        status=status_at(draft, now),
        revision=draft.revision,
        summary=draft.summary,
        amount=signed.amount,
        inconsistent=signed.problem,
        risk=draft.risk,
        progress=standing,
        proposed_by=draft.proposed_by,
        on_behalf_of=draft.on_behalf_of,
        created_at=draft.created_at,
        expires_at=draft.expires_at,
    )


def _sort_key(sort: Sort) -> Callable[[InboxItem], tuple[Any, ...]]:
    """Ties always fall back to age, then id, so the order is stable between refreshes.

    Amounts compare in major units, each with its currency's ISO 4217 exponent (no exchange
    rates: 12.50 USD sorts beside 12.50 EUR, never beside 1,250 JPY); none sorts lowest."""

    def amount(item: InboxItem) -> Decimal:
        if item.amount is None:
            return Decimal(-1)
        return to_major(item.amount.amount_minor, item.amount.currency)

    primary: Callable[[InboxItem], Any] = {
        Sort.AGE: lambda item: item.created_at.timestamp(),
        Sort.AMOUNT: amount,
        Sort.RISK: lambda item: RISK_RANK.get(item.risk, len(RISK_RANK)),
        Sort.EXPIRY: lambda item: item.expires_at.timestamp(),
    }[sort]
    return lambda item: (primary(item), item.created_at.timestamp(), item.draft_id)
