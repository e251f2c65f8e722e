"""How far a draft is from approved: the one answer that the execute gate, the worker, the
approve path and every view (API, agent, console, CLI) read. Nothing else counts approvals
(DESIGN.md §12, "Approval progress has one owner").

A signed decision counts when its signature verifies over exactly what it covers (the draft's
current revision: tenant, id, revision, action, contract version and the digest of the params
as stored now), with a key registered to its approver and not revoked, by someone who did
not propose the draft (maker ≠ checker), once per approver. The number required is the
larger of what the draft recorded when it was proposed and what the configured policy
demands now for the amount in the *signed* params (never the unsigned amount columns), so no
edited column and no lowered record can lower the bar. One verified rejection ends the draft.

Signed decisions come from sources (``SOURCES``): the approvals stored one per approver and
revision, and the standing grants that covered a draft's revision (``service.grants``). Each
source's decisions bring their own proof (what their signature covers, how it verifies);
every rule here applies to them unchanged, and no second place counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlmodel import Session

from service.approvals import errors, repository, signatures
from service.approvals.models import Approval
from service.approvals.schemas import BATCH_STATEMENT_TYPE, STATEMENT_TYPE, Decision
from service.approvals.signed import Proof, Rules, SignedDecision, Source
from service.canonical import canonical_json, params_sha256
from service.drafts.models import Draft
from service.drafts.policy import PolicyQuestion, applied_policies, as_proposed
from service.errors import DomainError
from service.executions import errors as execution_errors
from service.grants.proof import GrantedApprovals
from service.keys import repository as keys_repository
from service.keys.assertions import RelyingParty, relying_party
from service.keys.repository import Credential

__all__ = ["Proof", "Rules", "SignedDecision", "Source"]  # the types every source shares

# Why a signed decision does not count (shown to approvers beside each decision).
EARLIER_REVISION = "signed an earlier revision"
KEY_NOT_REGISTERED = "the signing key is not registered to the approver"
REVOKED_BEFORE = "the key was revoked before it signed"
SIGNED_BY_PROPOSER = "the approver proposed the draft"
# A valid approval whose key was revoked afterwards: historical, no longer counted
# (revocation answers a stolen key, so nothing it approved runs).
REVOKED_SINCE = "the key was revoked after it signed; its approvals no longer count"
COUNTED_ONCE = "another approval of the same approver already counts"


@dataclass(frozen=True)
class Verdict:
    """What counting made of one signed decision."""

    signed: SignedDecision
    problem: str | None  # why it does not count; None: it verifies
    counts: bool  # a verified approval of the current revision, the approver's first


class Bar(StrEnum):
    """Why someone may not sign a draft's current revision."""

    PROPOSER = "proposer"  # maker ≠ checker
    ALREADY_SIGNED = "already_signed"  # one signature per approver and revision


@dataclass(frozen=True)
class ApprovalProgress:
    """How far one draft is from approved, as the execute gate and the worker see it."""

    draft_id: str
    revision: int
    required: int
    verdicts: tuple[Verdict, ...]  # every signed decision on the draft, oldest first
    proposers: frozenset[str]  # who may not decide it
    # Why the number required cannot be known (the action is gone, the params do not
    # validate): then nothing is met.
    unknown_requirement: str | None = None

    @property
    def current(self) -> list[Verdict]:
        """The verdicts on decisions about the current revision."""
        return [v for v in self.verdicts if v.signed.revision == self.revision]

    @property
    def approvers(self) -> list[str]:
        """Who counts, sorted."""
        return sorted(v.signed.approver for v in self.verdicts if v.counts)

    @property
    def received(self) -> int:
        return len(self.approvers)

    @property
    def missing(self) -> int:
        return max(0, self.required - self.received)

    @property
    def rejections(self) -> list[Verdict]:
        """Verified rejections of the current revision: any one ends the draft."""
        return [
            v for v in self.current if v.problem is None and v.signed.decision is Decision.REJECT
        ]

    @property
    def rejected_by(self) -> list[str]:
        return sorted(v.signed.approver for v in self.rejections)

    @property
    def met(self) -> bool:
        """Whether the draft may run on these approvals (no rejection, enough approvers)."""
        return (
            self.unknown_requirement is None
            and not self.rejections
            and self.received >= self.required
        )

    @property
    def problems(self) -> list[str]:
        """Why each decision on the current revision does not count, and why the number
        required is unknown, if it is."""
        found = [self.unknown_requirement] if self.unknown_requirement else []
        return found + [
            f"{v.signed.reference} by {v.signed.approver}: {v.problem}"
            for v in self.current
            if v.problem
        ]

    @property
    def revoked(self) -> list[str]:
        """Approvers whose approval verified but whose key was revoked since."""
        return sorted(
            v.signed.approver
            for v in self.current
            if v.problem == REVOKED_SINCE and v.signed.decision is Decision.APPROVE
        )

    def verdict(self, reference: str) -> Verdict | None:
        return next((v for v in self.verdicts if v.signed.reference == reference), None)

    def bar(self, subject: str, decision: Decision = Decision.APPROVE) -> Bar | None:
        """Why ``subject`` may not sign ``decision`` on the current revision now, or None. A
        standing grant's approval of a draft never keeps its approver from rejecting it."""
        if subject in self.proposers:
            return Bar.PROPOSER
        signed = [v for v in self.current if v.signed.approver == subject]
        if decision is Decision.REJECT:
            signed = [v for v in signed if v.signed.grant_id is None]
        if signed:
            return Bar.ALREADY_SIGNED
        return None

    def refusal(self) -> DomainError:
        """Why the draft may not run, as the error its execution is refused with."""
        # Only revocations stand between it and the quorum: not tampering, a stolen key.
        revoked = self.revoked
        only_revoked = revoked and len(self.problems) == len(revoked)
        if only_revoked and self.received + len(revoked) >= self.required and not self.rejections:
            return errors.approval_key_revoked(revoked)
        return execution_errors.approvals_unverified(
            {
                "required": self.required,
                "verified_approvers": self.approvers,
                "problems": self.problems,
            }
        )


def proposers_of(draft: Draft) -> frozenset[str]:
    """Who may not decide a draft (maker ≠ checker): the agent that proposed it and the end
    user it was proposed for."""
    return frozenset(s for s in (draft.proposed_by, draft.on_behalf_of) if s)


def of_draft(
    session: Session, rules: Rules, draft: Draft, *, new: bool = False
) -> ApprovalProgress:
    """The approval progress of one draft (see ``of_drafts``); ``new``: this unit of work
    wrote its current revision."""
    return of_drafts(session, rules, [draft], new=frozenset({draft.id} if new else ()))[draft.id]


def of_drafts(
    session: Session, rules: Rules, drafts: Sequence[Draft], *, new: frozenset[str] = frozenset()
) -> dict[str, ApprovalProgress]:
    """The approval progress of each draft, by id, judged from the stored rows now (no
    status flag is trusted). A fixed number of queries whatever the number of drafts: the
    signed decisions of every source, their keys, and the policy peers' amounts. ``new``:
    the drafts whose current revision this unit of work wrote."""
    signed: dict[str, list[SignedDecision]] = {draft.id: [] for draft in drafts}
    for source in SOURCES:
        for draft_id, decisions in source.load(session, rules, drafts, new=new).items():
            signed[draft_id].extend(decisions)
    keys = _keys(session, drafts, signed)
    required = _required(session, rules, drafts)
    party = relying_party(rules.settings)
    return {
        draft.id: _progress(
            draft,
            sorted(signed[draft.id], key=lambda s: (s.signed_at, s.reference)),
            keys.get(draft.tenant, {}),
            required[draft.id],
            party,
        )
        for draft in drafts
    }


def _progress(
    draft: Draft,
    decisions: list[SignedDecision],
    keys: Mapping[str, Credential],
    required: int | str,
    party: RelyingParty,
) -> ApprovalProgress:
    digest = params_sha256(draft.params)
    proposers = proposers_of(draft)
    verdicts: list[Verdict] = []
    counted: set[str] = set()
    for signed in decisions:
        problem = _problem(signed, draft, keys.get(signed.key_id), digest, proposers, party)
        counts = problem is None and signed.decision is Decision.APPROVE
        if counts and signed.approver in counted:
            problem, counts = COUNTED_ONCE, False
        if counts:
            counted.add(signed.approver)
        verdicts.append(Verdict(signed, problem, counts))
    return ApprovalProgress(
        draft_id=draft.id,
        revision=draft.revision,
        required=required if isinstance(required, int) else 1,
        verdicts=tuple(verdicts),
        proposers=proposers,
        unknown_requirement=required if isinstance(required, str) else None,
    )


def _problem(
    signed: SignedDecision,
    draft: Draft,
    key: Credential | None,
    digest: str,
    proposers: frozenset[str],
    party: RelyingParty,
) -> str | None:
    """Why a signed decision does not count for the draft's current revision, or None."""
    if signed.revision != draft.revision:
        return EARLIER_REVISION
    problem = signed.proof.binding_problem(draft, digest)
    if problem:
        return problem
    if key is None or key.approver != signed.approver:
        return KEY_NOT_REGISTERED
    if key.revoked_at is not None and key.revoked_at <= signed.signed_at:
        return REVOKED_BEFORE
    problem = signed.proof.signature_problem(key, party)
    if problem:
        return problem
    if signed.approver in proposers:
        return SIGNED_BY_PROPOSER
    if key.revoked_at is not None:
        return REVOKED_SINCE
    return None


def _keys(
    session: Session, drafts: Sequence[Draft], signed: Mapping[str, list[SignedDecision]]
) -> dict[str, dict[str, Credential]]:
    """The credentials the decisions name, by tenant and key id (one query per scheme)."""
    wanted: dict[str, set[str]] = {}
    for draft in drafts:
        wanted.setdefault(draft.tenant, set()).update(s.key_id for s in signed[draft.id])
    return {
        tenant: keys_repository.by_ids(session, tenant, key_ids)
        for tenant, key_ids in wanted.items()
    }


def _required(session: Session, rules: Rules, drafts: Sequence[Draft]) -> dict[str, int | str]:
    """How many approvers each draft needs now, or why that cannot be known."""
    unknown: dict[str, str] = {}
    questions: list[PolicyQuestion] = []
    for draft in drafts:
        amount = rules.signed_amount(draft)
        if isinstance(amount, str):
            unknown[draft.id] = amount
            continue
        questions.append(as_proposed(draft, amount))
    applied = applied_policies(
        session,
        rules.policies,
        questions,
        default_ttl_seconds=rules.settings.default_draft_ttl_seconds,
    )
    return {
        draft.id: unknown.get(draft.id)
        or max(draft.approvals_required, applied[draft.id][0].approvals_required, 1)
        for draft in drafts
    }


# --- the stored approvals: the first source ------------------------------------------------


@dataclass(frozen=True)
class StoredProof:
    """A stored approval's statement, exactly as signed, and its signature over
    JCS(statement): an Ed25519 signature or a passkey's assertion (docs/approvals.md)."""

    approval: Approval

    def binding_problem(self, draft: Draft, digest: str) -> str | None:
        approval = self.approval
        statement = approval.statement
        binds = {
            "revision": draft.revision,
            "action": draft.action,
            "contract_version": draft.contract_version,
            "params_sha256": digest,
            "source_revision": draft.source_revision,
        }
        signer = {
            "tenant": draft.tenant,
            "approver": approval.approver,
            "key_id": approval.key_id,
        }
        if statement.get("type") == BATCH_STATEMENT_TYPE:
            # A batch approves each draft it names once; the item binds it as an approval
            # statement would, the statement's top the signer.
            items = [
                item
                for item in statement.get("items") or []
                if isinstance(item, dict) and item.get("draft_id") == draft.id
            ]
            if len(items) != 1 or approval.decision is not Decision.APPROVE:
                return "the batch statement does not approve the draft exactly once"
            return _mismatch({**signer, "type": BATCH_STATEMENT_TYPE}, statement) or _mismatch(
                binds, items[0]
            )
        expected = {
            **signer,
            **binds,
            "type": STATEMENT_TYPE,
            "draft_id": draft.id,
            "decision": approval.decision.value,
        }
        return _mismatch(expected, statement)

    def signature_problem(self, key: Credential, party: RelyingParty) -> str | None:
        signed = canonical_json(self.approval.statement)
        return signatures.problem(self.approval, key, signed, party)


def _mismatch(expected: Mapping[str, object], signed: Mapping[str, object]) -> str | None:
    mismatched = sorted(name for name, value in expected.items() if signed.get(name) != value)
    if mismatched:
        return "statement does not match the stored draft: " + ", ".join(mismatched)
    return None


class StoredApprovals:
    """The decisions ``POST /v1/drafts/{id}/approvals`` accepted: one row per approver and
    revision."""

    def load(
        self, session: Session, rules: Rules, drafts: Sequence[Draft], *, new: frozenset[str]
    ) -> dict[str, list[SignedDecision]]:
        rows = repository.for_drafts(session, [d.id for d in drafts if d.id not in new])
        return {draft_id: [stored(a) for a in approvals] for draft_id, approvals in rows.items()}


def stored(approval: Approval) -> SignedDecision:
    return SignedDecision(
        reference=approval.id,
        approver=approval.approver,
        key_id=approval.key_id,
        scheme=approval.scheme,
        decision=approval.decision,
        reason=approval.reason,
        issued_at=str(approval.statement.get("issued_at")),
        signed_at=approval.created_at,
        revision=approval.revision,
        proof=StoredProof(approval),
    )


SOURCES: tuple[Source, ...] = (StoredApprovals(), GrantedApprovals())
