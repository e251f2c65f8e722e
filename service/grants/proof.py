"""Standing grants as a source of signed decisions for the progress owner: a grant that
covered a draft's revision counts as its approver's approval of it, when its signature
verifies and the draft still falls within every signed term and cap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from sqlmodel import Session

from service.approvals import signatures
from service.approvals.schemas import Decision
from service.approvals.signed import Rules, SignedDecision
from service.canonical import canonical_json
from service.drafts.models import Draft
from service.grants import repository, terms
from service.grants.models import Grant, GrantUse
from service.grants.schemas import GrantStatement, grant_id_of
from service.keys.assertions import RelyingParty
from service.keys.repository import Credential
from service.sql import utcnow

REVOKED = "the grant was revoked"


def statement_of(grant: Grant) -> GrantStatement | None:
    """The grant's stored statement, if it is one (a row written around draftgate may not be)."""
    try:
        return GrantStatement.model_validate(grant.statement)
    except ValidationError:
        return None


@dataclass(frozen=True)
class GrantProof:
    """A grant's statement, exactly as signed, its signature, and the use that covered the
    draft's revision with the uses before it (for the caps)."""

    grant: Grant
    use: GrantUse
    earlier: tuple[terms.Spent, ...]
    rules: Rules

    def binding_problem(self, draft: Draft, digest: str) -> str | None:
        grant, use = self.grant, self.use
        statement = statement_of(grant)
        if statement is None or grant_id_of(grant.statement) != grant.id:
            return "the grant's stored statement is not the one its id names"
        if (statement.tenant, statement.approver, statement.key_id) != (
            grant.tenant,
            grant.approver,
            grant.key_id,
        ):
            return "the grant's row does not match its signed statement"
        if grant.revoked_at is not None:
            return REVOKED
        policy = self.rules.policies.get(draft.action)
        if policy is None or policy.grants is None:
            return f"the policy of {draft.action} no longer lets it be granted"
        if use.params_sha256 != digest:
            return "the grant covered other params"
        amount = self.rules.signed_amount(draft)
        if isinstance(amount, str):
            return amount
        return (
            terms.duration_problem(statement, policy.grants.max_seconds)
            or terms.window_problem(statement, use.created_at)
            or terms.expired_problem(statement, utcnow())
            or terms.fit_problem(statement, draft, amount)
            or terms.cap_problem(
                statement, self.earlier, use.created_at, amount.amount_minor if amount else None
            )
        )

    def signature_problem(self, key: Credential, party: RelyingParty) -> str | None:
        return signatures.problem(self.grant, key, canonical_json(self.grant.statement), party)


class GrantedApprovals:
    """The grants that covered the drafts' revisions: at most one per draft. A revision this
    unit of work wrote (``new``) is one no grant covered: whoever covers it with a grant
    counts it as not new any more (``service.grants.actions.cover``)."""

    def load(
        self, session: Session, rules: Rules, drafts: Sequence[Draft], *, new: frozenset[str]
    ) -> dict[str, list[SignedDecision]]:
        uses = repository.uses_of_drafts(session, [d.id for d in drafts if d.id not in new])
        grants = repository.by_ids(session, {use.grant_id for use in uses.values()})
        spent = repository.uses_of_grants(session, grants)
        return {
            draft_id: [granted(grants[use.grant_id], use, spent[use.grant_id], rules)]
            for draft_id, use in uses.items()
        }


def granted(grant: Grant, use: GrantUse, uses: list[GrantUse], rules: Rules) -> SignedDecision:
    """The grant's approval of the revision ``use`` covered; ``uses``: all the grant's uses."""
    earlier = tuple(
        terms.Spent(other.created_at, other.amount_minor) for other in uses if other.seq < use.seq
    )
    return SignedDecision(
        reference=grant.id,
        approver=grant.approver,
        key_id=grant.key_id,
        scheme=grant.scheme,
        decision=Decision.APPROVE,
        reason=None,
        issued_at=str(grant.statement.get("issued_at")),
        signed_at=grant.created_at,
        revision=use.revision,
        proof=GrantProof(grant, use, earlier, rules),
        grant_id=grant.id,
    )
