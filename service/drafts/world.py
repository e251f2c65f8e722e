"""The world a draft changes, as an approver should see it before signing: its source as
proposed and as it stands now, the other drafts that may still change it, and what they add
up to against what the source allows (docs/decisions/approvals-bind-the-source-state.md)."""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import ValidationError
from sqlmodel import Session

from service.drafts import repository
from service.drafts.models import OPEN_STATUSES, Draft
from service.drafts.schemas import PendingDraftView, SourceFactView, SourceView, amount_of
from service.drafts.state import status_at
from service.errors import DomainError
from service.money import AmountView
from service.principal import Principal, Role
from service.registry.base import ActionContext, SourceState, source_name
from service.runtime import Runtime


def as_proposer(draft: Draft, *, token_id: str) -> Principal:
    """The agent that proposed the draft, for the end user it acted for, as the action reads and
    changes the world for it (its source, its execution); ``token_id`` says on whose behalf."""
    return Principal(
        tenant=draft.tenant,
        subject=draft.proposed_by,
        role=Role.AGENT,
        token_id=token_id,
        on_behalf_of=draft.on_behalf_of,
    )


def source_now(
    session: Session, runtime: Runtime, draft: Draft, now: datetime
) -> SourceState | None:
    """The draft's source as it stands, read as its proposer may read it; None when the
    action declares none or it can no longer be read."""
    action = runtime.registry.write(draft.action)
    if action is None or draft.source_ref is None:
        return None
    proposer = as_proposer(draft, token_id=f"draft:{draft.id}")
    ctx = ActionContext(session=session, principal=proposer, settings=runtime.settings, now=now)
    try:
        params = action.Input.model_validate_json(json.dumps(draft.params))
        return action.source(ctx, params)
    except (ValidationError, DomainError):
        return None


def source_view(
    session: Session, runtime: Runtime, draft: Draft, now: datetime
) -> SourceView | None:
    if draft.source_ref is None or draft.source_revision is None:
        return None
    current = source_now(session, runtime, draft, now)
    changed = {c["label"]: c["now"] for c in current.changes_from(draft.source)} if current else {}
    others = repository.pending_on_source(
        session, draft.tenant, draft.source_ref, now=now, excluding=draft.id
    )
    pending, total = _total(session, draft, now)
    limit = _limit(current)
    return SourceView(
        ref=draft.source_ref,
        revision=draft.source_revision,
        current_revision=current.revision if current else None,
        moved=current is None or current.revision != draft.source_revision,
        facts=[
            SourceFactView(label=fact["label"], value=fact["value"], now=changed.get(fact["label"]))
            for fact in draft.source or []
        ],
        others=[
            PendingDraftView(
                draft_id=other.id,
                status=status_at(other, now),
                summary=other.summary,
                amount=amount_of(other),
            )
            for other in others
        ],
        others_count=pending,
        total=total,
        limit=limit,
        warning=_warning(draft, current, pending, total, limit),
    )


def _total(session: Session, draft: Draft, now: datetime) -> tuple[int, AmountView | None]:
    """How many other drafts may still change the draft's source, and the amount all of them
    and this one come to in its currency (every one: padding the list with small drafts
    cannot hide a large one from the sum)."""
    assert draft.source_ref is not None
    others, pending = repository.pending_totals(
        session,
        draft.tenant,
        draft.source_ref,
        currency=draft.currency,
        now=now,
        excluding=draft.id,
    )
    if draft.amount_minor is None or not draft.currency:
        return others, None
    return others, AmountView.of(pending + draft.amount_minor, draft.currency)


def _limit(current: SourceState | None) -> AmountView | None:
    return None if current is None else current.limit


def _warning(
    draft: Draft,
    current: SourceState | None,
    others: int,
    total: AmountView | None,
    limit: AmountView | None,
) -> str | None:
    if draft.status not in OPEN_STATUSES:
        return None  # decided: its own execution, if any, moved the source; nothing to warn of
    name = source_name(draft.source_ref or "")
    if current is None:
        return (
            f"{name} cannot be read now: its state is not known, and an execution that "
            "cannot read it fails."
        )
    if current.revision != draft.source_revision:
        return (
            f"{name} changed since this draft was proposed: an approval now would be for a "
            "state that no longer exists; execution will refuse it (SOURCE_CHANGED)."
        )
    if total is None or limit is None or total.currency != limit.currency:
        return None
    if total.amount_minor <= limit.amount_minor:
        return None
    with_others = f" with {others} other pending draft(s)" if others else ""
    return (
        f"Together{with_others} this comes to {total.display}, more than the {limit.display} "
        f"{name} allows now: not all of them can be executed."
    )
