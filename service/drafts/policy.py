"""Which policy a draft falls under: its amount, added to its peers' when the policy says
amounts add up (drafts sharing a parameter value, e.g. refunds of one order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.drafts import repository
from service.drafts.models import Draft
from service.money import Money
from service.policies.actions import peer_key, resolve
from service.policies.schemas import AppliedPolicy, PolicyConfig


@dataclass(frozen=True)
class PolicyQuestion:
    """One draft's policy question. ``as_of`` ends the cumulative window: now for a
    proposal; the draft's creation for a re-check, which then counts only the peers created
    before it (``created_before``)."""

    draft_id: str
    tenant: str
    action: str
    params: dict[str, Any]
    amount: Money | None
    as_of: datetime
    created_before: datetime | None = None


def as_proposed(draft: Draft, amount: Money | None) -> PolicyQuestion:
    """A draft's policy question as of its creation: the peers that were there when it was
    proposed, never later ones."""
    return PolicyQuestion(
        draft_id=draft.id,
        tenant=draft.tenant,
        action=draft.action,
        params=draft.params,
        amount=amount,
        as_of=draft.created_at,
        created_before=draft.created_at,
    )


def applied_policy(
    session: Session,
    policies: dict[str, PolicyConfig],
    action: str,
    *,
    tenant: str,
    params: dict[str, Any],
    amount: Money | None,
    default_ttl_seconds: int,
    as_of: datetime,
    draft_id: str,
    created_before: datetime | None = None,
) -> tuple[AppliedPolicy, str | None]:
    """The applied policy and the draft's peer key (see ``PolicyQuestion``)."""
    question = PolicyQuestion(draft_id, tenant, action, params, amount, as_of, created_before)
    return applied_policies(session, policies, [question], default_ttl_seconds=default_ttl_seconds)[
        draft_id
    ]


def applied_policies(
    session: Session,
    policies: dict[str, PolicyConfig],
    questions: Sequence[PolicyQuestion],
    *,
    default_ttl_seconds: int,
) -> dict[str, tuple[AppliedPolicy, str | None]]:
    """The applied policy and peer key of each question's draft, by draft id; the peers'
    amounts of all of them come from one query."""
    keys: dict[str, str | None] = {}
    windows: dict[str, repository.PeerWindow] = {}
    for question in questions:
        config = policies.get(question.action)
        keys[question.draft_id] = key = peer_key(config, question.params)
        amount = question.amount
        if key is not None and amount is not None and config is not None and config.cumulative:
            windows[question.draft_id] = repository.PeerWindow(
                tenant=question.tenant,
                action=question.action,
                policy_key=key,
                currency=amount.currency,
                since=question.as_of - timedelta(seconds=config.cumulative.window_seconds),
                before=question.created_before,
                exclude=question.draft_id,
            )
    prior = repository.peers_amounts(session, windows)
    return {
        question.draft_id: (
            resolve(
                policies,
                question.action,
                amount=question.amount,
                default_ttl_seconds=default_ttl_seconds,
                prior_minor=prior.get(question.draft_id, 0),
            ),
            keys[question.draft_id],
        )
        for question in questions
    }
