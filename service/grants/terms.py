"""Whether a draft falls within a grant's signed terms: one place for the check made when a
grant covers a draft at its proposal and again by every count, the worker's included."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.drafts.models import Draft
from service.grants.schemas import GrantStatement, duration, per
from service.money import Money, render_amount


@dataclass(frozen=True)
class Spent:
    """An earlier draft the grant covered, as its caps count it."""

    at: datetime
    amount_minor: int | None


def fit_problem(statement: GrantStatement, draft: Draft, amount: Money | None) -> str | None:
    """Why the draft (``amount``: of its signed params) is not one the grant allows, or None."""
    if (statement.tenant, statement.action) != (draft.tenant, draft.action):
        return "the grant is for another action"
    if statement.max_amount_minor is None:
        if amount is not None:
            return f"the grant covers no amount and the draft moves {amount.render()}"
    elif amount is None:
        return "the draft moves no amount the grant could bound"
    elif amount.currency != statement.currency:
        return f"the grant bounds {statement.currency} amounts, the draft moves {amount.render()}"
    elif amount.amount_minor > statement.max_amount_minor:
        bound = render_amount(statement.max_amount_minor, amount.currency)
        return f"{amount.render()} is more than the grant's {bound} each"
    if statement.source_ref is not None and draft.source_ref != statement.source_ref:
        return f"the grant covers only drafts on {statement.source_ref}"
    if statement.agent is not None and draft.proposed_by != statement.agent:
        return f"the grant covers only drafts proposed by {statement.agent}"
    return None


def window_problem(statement: GrantStatement, at: datetime) -> str | None:
    """Why the grant was not standing at ``at``, or None."""
    start, end = statement.window
    if at < start:
        return "the grant was not yet standing"
    if at >= end:
        return "the grant had expired"
    return None


def expired_problem(statement: GrantStatement, now: datetime) -> str | None:
    """Why the grant no longer counts at ``now``: it covers a draft only while it stands, so
    a draft it covered that has not run when it expires needs a person's signature."""
    return "the grant has expired" if now >= statement.window[1] else None


def cap_problem(
    statement: GrantStatement, earlier: Sequence[Spent], at: datetime, amount_minor: int | None
) -> str | None:
    """Why covering one more draft of ``amount_minor`` at ``at``, after ``earlier``, would go
    past the grant's caps, or None."""
    if statement.max_uses is not None and len(earlier) >= statement.max_uses:
        return f"the grant's {statement.max_uses} uses are spent"
    if statement.cap_minor is None or statement.cap_window_seconds is None:
        return None
    since = at - timedelta(seconds=statement.cap_window_seconds)
    total = (amount_minor or 0) + sum(s.amount_minor or 0 for s in earlier if s.at > since)
    if total > statement.cap_minor:
        currency = statement.currency or ""
        return (
            f"with it the grant's drafts add up to {render_amount(total, currency)} "
            f"{per(statement.cap_window_seconds)}, over its cap of "
            f"{render_amount(statement.cap_minor, currency)}"
        )
    return None


def duration_problem(statement: GrantStatement, max_seconds: int) -> str | None:
    """Why the grant stands longer than the policy allows, or None."""
    start, end = statement.window
    if end - start > timedelta(seconds=max_seconds):
        return (
            f"the grant stands for {duration(end - start)}; the policy allows at most "
            f"{duration(timedelta(seconds=max_seconds))}"
        )
    return None
