"""Which policy a draft falls under: its amount, added to its peers' when the policy says
amounts add up (drafts sharing a parameter value, e.g. refunds of one order)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.drafts import repository
from service.money import Money
from service.policies.actions import peer_key, resolve
from service.policies.schemas import AppliedPolicy, PolicyConfig


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
    """The applied policy and the draft's peer key.

    ``as_of`` ends the cumulative window: now for a proposal; the draft's creation for the
    quorum re-check, which then counts only peers created before it (``created_before``).
    """
    config = policies.get(action)
    key = peer_key(config, params)
    prior = 0
    if key is not None and amount is not None and config is not None and config.cumulative:
        prior = repository.peers_amount(
            session,
            tenant=tenant,
            action=action,
            policy_key=key,
            currency=amount.currency,
            since=as_of - timedelta(seconds=config.cumulative.window_seconds),
            before=created_before,
            exclude=draft_id,
        )
    policy = resolve(
        policies,
        action,
        amount=amount,
        default_ttl_seconds=default_ttl_seconds,
        prior_minor=prior,
    )
    return policy, key
