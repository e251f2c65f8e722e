"""Shadow mode for policies (issue 21.5): the drafts of the last days, judged again under a
proposed policy file, before it is switched on. Nothing is written.

Each draft is judged as the execute gate would have judged it at its creation: its amount,
added to its peers' created before it within the window (service.drafts.policy), under the
proposed policies and under the ones configured now. The peers are the drafts that share
the stored peer key, which the configured policy's ``cumulative.by`` made: a proposed policy
that adds amounts up by another parameter is simulated without peers, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from service.drafts import repository
from service.drafts.models import Draft
from service.drafts.policy import PolicyQuestion, applied_policies, as_proposed
from service.drafts.schemas import amount_of
from service.grants import repository as grants_repository
from service.grants import terms
from service.grants.models import Grant
from service.grants.proof import statement_of
from service.money import AmountView, Money
from service.policies.schemas import PolicyConfig

MAX_DRAFTS = 10_000


@dataclass(frozen=True)
class Judged:
    draft_id: str
    tenant: str
    action: str
    status: str
    created_at: datetime
    amount: AmountView | None
    recorded: int  # approvals required as recorded at proposal
    now: int  # under the policies configured now
    proposed: int  # under the proposed policies
    rule: str  # the proposed policy's rule, in words
    # The standing grant that would have covered it under the proposed policies (its terms
    # and window at the draft's creation; caps are not simulated), or None.
    grant: str | None = None


@dataclass(frozen=True)
class Simulation:
    drafts: list[Judged]
    truncated: bool
    notes: list[str]

    def count(self, compare: str) -> int:
        """How many drafts the proposed policies ask ``more``, ``fewer`` or the ``same``
        approvals of than the configured ones."""
        sign = {"more": 1, "fewer": -1, "same": 0}[compare]
        return sum(1 for d in self.drafts if (d.proposed > d.now) - (d.proposed < d.now) == sign)

    @property
    def granted(self) -> int:
        """How many drafts a standing grant would have covered (one approval each)."""
        return sum(1 for d in self.drafts if d.grant)


def simulate(
    session: Session,
    configured: dict[str, PolicyConfig],
    proposed: dict[str, PolicyConfig],
    *,
    since: datetime,
    tenant: str | None,
    default_ttl_seconds: int,
) -> Simulation:
    drafts = repository.created_since(session, since, tenant=tenant, limit=MAX_DRAFTS + 1)
    truncated, drafts = len(drafts) > MAX_DRAFTS, drafts[:MAX_DRAFTS]
    questions = [_question(draft) for draft in drafts]
    now = applied_policies(session, configured, questions, default_ttl_seconds=default_ttl_seconds)
    then = applied_policies(session, proposed, questions, default_ttl_seconds=default_ttl_seconds)
    standing = grants_repository.listed_all(session, tenant=tenant)
    judged = [
        Judged(
            draft_id=draft.id,
            tenant=draft.tenant,
            action=draft.action,
            status=draft.status.value,
            created_at=draft.created_at,
            amount=amount_of(draft),
            recorded=draft.approvals_required,
            now=now[draft.id][0].approvals_required,
            proposed=then[draft.id][0].approvals_required,
            rule=then[draft.id][0].rule,
            grant=_grant_for(draft, standing, proposed),
        )
        for draft in drafts
    ]
    notes = _notes(configured, proposed)
    if any(j.grant for j in judged):
        notes.append("grants: their caps and use counts are not simulated, only their terms")
    return Simulation(judged, truncated, notes)


def _grant_for(draft: Draft, grants: list[Grant], proposed: dict[str, PolicyConfig]) -> str | None:
    """The first grant standing when the draft was proposed whose terms it fits, if the
    proposed policy lets its action be granted (for that long)."""
    policy = proposed.get(draft.action)
    if policy is None or policy.grants is None:
        return None
    amount = _question(draft).amount
    for grant in grants:
        statement = statement_of(grant)
        if statement is None or grant.tenant != draft.tenant or grant.action != draft.action:
            continue
        if grant.created_at > draft.created_at or (
            grant.revoked_at is not None and grant.revoked_at <= draft.created_at
        ):
            continue
        if grant.approver in (draft.proposed_by, draft.on_behalf_of):
            continue
        problem = (
            terms.duration_problem(statement, policy.grants.max_seconds)
            or terms.window_problem(statement, draft.created_at)
            or terms.fit_problem(statement, draft, amount)
        )
        if problem is None:
            return grant.id
    return None


def _question(draft: Draft) -> PolicyQuestion:
    """As the gate asks it, from the amount recorded at proposal (which the gate recomputes
    from the signed params; a draft whose columns were changed shows on its card)."""
    amount = None
    if draft.amount_minor is not None and draft.amount_minor > 0 and draft.currency:
        amount = Money(amount_minor=draft.amount_minor, currency=draft.currency)
    return as_proposed(draft, amount)


def _notes(configured: dict[str, PolicyConfig], proposed: dict[str, PolicyConfig]) -> list[str]:
    notes = []
    for action, policy in sorted(proposed.items()):
        now = configured.get(action)
        by = policy.cumulative.by if policy.cumulative else None
        if by is not None and (now is None or now.cumulative is None or now.cumulative.by != by):
            notes.append(
                f"{action}: the proposed policy adds amounts up by {by!r}, the configured one "
                "does not: its drafts are simulated without peers"
            )
    return notes
