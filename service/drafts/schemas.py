"""How drafts are shown: to the agent (masked, with advice) and, later, to approvers."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.approvals import progress
from service.approvals.schemas import Decision
from service.drafts.models import Draft, DraftStatus
from service.executions.models import ExecutionStatus
from service.money import AmountView

DRAFT_ID_PATTERN = r"^dft_[0-9a-f]{32}$"
# A draft as an MCP resource (and the id of its task): one spelling, parsed back here only.
DRAFT_URI_PREFIX = "draftgate://drafts/"
DRAFT_URI_TEMPLATE = DRAFT_URI_PREFIX + "{draft_id}"


def draft_uri(draft_id: str) -> str:
    return DRAFT_URI_PREFIX + draft_id


def draft_id_of_uri(uri: str) -> str | None:
    """The draft id a ``draftgate://drafts/<id>`` URI names, or None for any other text."""
    if not uri.startswith(DRAFT_URI_PREFIX):
        return None
    draft_id = uri.removeprefix(DRAFT_URI_PREFIX)
    return draft_id if re.fullmatch(DRAFT_ID_PATTERN, draft_id) else None


# How long an agent should wait before looking again, by status: a human takes minutes to
# decide; an execution takes seconds. Final statuses have nothing to wait for.
POLL_AFTER_SECONDS = {
    DraftStatus.PROPOSED: 30,
    DraftStatus.APPROVED: 10,
    DraftStatus.QUEUED: 2,
    DraftStatus.RUNNING: 2,
}


class ApprovalProgress(BaseModel):
    """How far the draft is from approved, exactly as the execute gate counts it."""

    required: int = Field(
        description="Distinct human approvals required now: the larger of what the draft "
        "recorded when proposed and what the configured policy demands today."
    )
    received: int = Field(
        description="Approvals of the current revision that count: their signatures verify "
        "now, with keys not revoked, by approvers other than the proposer."
    )

    @classmethod
    def of(cls, standing: progress.ApprovalProgress) -> ApprovalProgress:
        return cls(required=standing.required, received=standing.received)


class ProgressDetail(ApprovalProgress):
    """The approval progress in full, for approvers and auditors."""

    missing: int = Field(description="Approvals still needed (0 once enough count).")
    approvers: list[str] = Field(description="Who counts toward the quorum.")
    rejected_by: list[str] = Field(description="Who rejected it (one rejection ends it).")
    met: bool = Field(
        description="Whether the approvals counted now let it execute (no rejection, enough "
        "approvers); what the execute endpoint and the worker decide on."
    )
    problem: str | None = Field(
        description="Why the number required cannot be known (then nothing is met)."
    )

    @classmethod
    def of(cls, standing: progress.ApprovalProgress) -> ProgressDetail:
        return cls(
            required=standing.required,
            received=standing.received,
            missing=standing.missing,
            approvers=standing.approvers,
            rejected_by=standing.rejected_by,
            met=standing.met,
            problem=standing.unknown_requirement,
        )


class AgentDraftView(BaseModel):
    """A draft as the agent sees it: no raw PII, and a message saying what to tell the user."""

    model_config = ConfigDict(frozen=True)

    draft_id: str
    trace_id: str | None = Field(
        default=None,
        description="The trace of the call that proposed this revision (32 hex digits): "
        "what approvers and auditors look it up by.",
    )
    action: str
    status: DraftStatus
    revision: int
    summary: str
    params: dict[str, Any] = Field(description="The proposed arguments, PII masked.")
    params_sha256: str
    source_revision: str | None = Field(
        default=None,
        description="The version of the record it changes (e.g. the order) this revision was "
        "proposed against: approvals are for that state. If it changes before execution, "
        "nothing is executed and the draft comes back as a new revision to approve.",
    )
    amount: AmountView | None = None
    risk: str
    approvals: ApprovalProgress
    created_at: datetime
    updated_at: datetime = Field(description="When its status or revision last changed.")
    expires_at: datetime
    replayed: bool = Field(
        default=False,
        description="True when this call returned an existing draft instead of creating one.",
    )
    reason: str | None = Field(
        default=None, description="Why the draft was rejected, failed or expired."
    )
    outcome: dict[str, Any] | None = Field(
        default=None, description="What the execution did, once it succeeded."
    )
    message: str = Field(description="What happened, in words to relay to the user.")
    next_action: str = Field(description="What the agent should do next.")
    poll_after_seconds: int | None = Field(
        default=None,
        description="While the draft is still open: wait at least this long before calling "
        "get_draft again (or subscribe to resource_uri instead of polling). null once final.",
    )
    resource_uri: str = Field(
        description="This draft as an MCP resource (resources/read gives this same view; "
        "subscribe to it to be told of every change instead of polling)."
    )


def agent_view(
    draft: Draft,
    *,
    status: DraftStatus,
    reason: str | None,
    masked_params: dict[str, Any],
    standing: progress.ApprovalProgress,
    replayed: bool = False,
    outcome: dict[str, Any] | None = None,
) -> AgentDraftView:
    message, next_action = _advice(draft, status, standing, outcome)
    return AgentDraftView(
        draft_id=draft.id,
        trace_id=draft.trace_id,
        action=draft.action,
        status=status,
        revision=draft.revision,
        summary=draft.summary,
        params=masked_params,
        params_sha256=draft.params_sha256,
        source_revision=draft.source_revision,
        amount=amount_of(draft),
        risk=draft.risk,
        approvals=ApprovalProgress.of(standing),
        created_at=draft.created_at,
        updated_at=draft.updated_at,
        expires_at=draft.expires_at,
        replayed=replayed,
        reason=reason,
        outcome=outcome,
        message=message,
        next_action=next_action,
        poll_after_seconds=POLL_AFTER_SECONDS.get(status),
        resource_uri=draft_uri(draft.id),
    )


def _advice(
    draft: Draft,
    status: DraftStatus,
    standing: progress.ApprovalProgress,
    outcome: dict[str, Any] | None,
) -> tuple[str, str]:
    check_later = (
        f"To learn the outcome, subscribe to {draft_uri(draft.id)} or call get_draft with "
        f"draft_id {draft.id} after poll_after_seconds."
    )
    match status:
        case DraftStatus.PROPOSED:
            # A reason on a proposed draft is why it is waiting again (its source moved, or an
            # approver narrowed it and another approval is needed).
            return (
                f"{_leading(draft.status_reason)}The request is recorded as draft {draft.id} "
                "and waits for human "
                f"approval ({standing.received} of {standing.required} approvals). Nothing has "
                "been executed yet.",
                "Tell the user the request is waiting for human review. " + check_later,
            )
        case DraftStatus.APPROVED if not standing.met:
            return (
                "A human approved the request, but its approvals no longer hold "
                f"({standing.received} of {standing.required} still count, for example "
                "because an approver's key was revoked), so it will not be executed. Nothing "
                "has run.",
                "Tell the user the request cannot be carried out as approved; propose it again "
                "if they still want it.",
            )
        case DraftStatus.APPROVED:
            # A reason on an approved draft is what the approver changed (they narrowed it).
            return (
                f"{_leading(draft.status_reason)}A human approved the request. Nothing has "
                "run yet: it runs once an approver starts its execution.",
                "Tell the user it was approved and waits to be carried out. " + check_later,
            )
        case DraftStatus.QUEUED | DraftStatus.RUNNING:
            return (
                "The approved request is being executed now.",
                "Tell the user it is in progress. " + check_later,
            )
    return _ended_advice(draft, status, outcome)


def _leading(reason: str | None) -> str:
    """A status reason as the sentence that opens the agent's message ("" when none)."""
    return f"{reason[:1].upper()}{reason[1:]}. " if reason else ""


def _ended_advice(
    draft: Draft, status: DraftStatus, outcome: dict[str, Any] | None
) -> tuple[str, str]:
    """What to say of a draft that reached a final status (nothing to wait for)."""
    match status:
        case DraftStatus.SUCCEEDED:
            done = str((outcome or {}).get("summary") or "the change was made").rstrip(".")
            return (f"Done: {done}.", "Tell the user the request has been completed.")
        case DraftStatus.FAILED:
            return (
                "The approved request could not be carried out: "
                f"{(draft.status_reason or 'unknown reason').rstrip('.')}.",
                "Tell the user it could not be completed and why. Do not re-propose it "
                "unless the reason has been resolved.",
            )
        case DraftStatus.REJECTED:
            return (
                f"A human reviewer declined this request (reason: {draft.status_reason}). "
                "Nothing was executed. This is not a system failure and not a permission "
                "problem: a person decided against it.",
                "Tell the user the request was declined and why. Do not propose the same "
                "change again unchanged.",
            )
        case DraftStatus.EXPIRED:
            return (
                "The request expired before it was carried out (drafts expire if they are not "
                "approved and executed in time); nothing was executed.",
                "If the user still wants it, propose it again.",
            )
        case DraftStatus.WITHDRAWN:
            return (
                "The request was withdrawn by the agent that proposed it, before anyone "
                "approved it; nothing was executed.",
                "Propose it again only if the user asks for it again.",
            )
    raise AssertionError(f"unhandled status {status}")  # pragma: no cover


class AgentDraftListing(BaseModel):
    """One of the agent's unfinished drafts, as its resource list shows it."""

    draft_id: str
    resource_uri: str
    action: str
    status: DraftStatus
    revision: int
    summary: str
    created_at: datetime


class AgentDraftPage(BaseModel):
    drafts: list[AgentDraftListing]
    next_cursor: str | None


class ProposedBy(BaseModel):
    agent: str
    on_behalf_of: str | None


class DraftSummary(BaseModel):
    """One line of the approver's queue."""

    draft_id: str
    action: str
    status: DraftStatus
    revision: int
    summary: str
    amount: AmountView | None
    risk: str
    approvals: ProgressDetail
    created_at: datetime
    expires_at: datetime


class DraftPage(BaseModel):
    drafts: list[DraftSummary]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null at the end."
    )


class RevisionView(BaseModel):
    revision: int
    params_sha256: str
    summary: str
    created_at: datetime


class ExecutionRef(BaseModel):
    """The draft's latest execution (of its latest executed revision)."""

    execution_id: str
    revision: int
    status: ExecutionStatus
    attempts: int = Field(description="Attempts started so far (retries and take-overs).")
    error: dict[str, Any] | None = Field(
        description="Why it failed: code, category, message (null unless it failed)."
    )


class DraftApproval(BaseModel):
    """One recorded decision on a draft, and whether it counts for the current revision."""

    approval_id: str
    revision: int
    approver: str
    key_id: str
    decision: Decision
    reason: str | None
    issued_at: str
    recorded_at: datetime
    counts: bool = Field(description="Whether it counts toward the current revision's quorum.")
    problem: str | None = Field(description="Why it does not count, if it does not.")
    grant_id: str | None = Field(
        default=None,
        description="The standing grant this approval comes from (approval_id names it too), "
        "or null for a decision signed on this draft.",
    )


class SourceFactView(BaseModel):
    label: str
    value: str = Field(description="As it was when this revision was proposed.")
    now: str | None = Field(
        default=None, description="As it is now, when it differs (null when unchanged)."
    )


class PendingDraftView(BaseModel):
    draft_id: str
    status: DraftStatus
    summary: str
    amount: AmountView | None


class SourceView(BaseModel):
    """The record the draft changes (its source): as the approver signs it, and as it is."""

    ref: str = Field(description="Which record, e.g. order:ORD-1001.")
    revision: str = Field(
        description="The revision the draft was proposed against; approvals bind it."
    )
    current_revision: str | None = Field(
        description="Its revision now (null if it can no longer be read)."
    )
    moved: bool = Field(description="It changed since the draft's revision was proposed.")
    facts: list[SourceFactView]
    others: list[PendingDraftView] = Field(
        description="Other drafts on the same source that may still change it (the first 50)."
    )
    others_count: int = Field(description="How many other drafts may still change it, all.")
    total: AmountView | None = Field(
        description="This draft's amount plus the others' in the same currency."
    )
    limit: AmountView | None = Field(description="The most the source allows them to move now.")
    warning: str | None = Field(description="Why approving needs a second look, if it does.")


class DraftDetail(BaseModel):
    """Everything an approver needs to decide, including the exact statement to sign."""

    draft_id: str
    tenant: str
    action: str
    contract_version: int
    revision: int
    status: DraftStatus
    status_reason: str | None
    params: dict[str, Any] = Field(
        description="The exact params; params_sha256 = sha256(JCS(params))."
    )
    params_sha256: str
    summary: str
    amount: AmountView | None
    risk: str
    source_revision: str | None = Field(
        description="The revision of its source this revision was proposed against, which "
        "the approve statement binds (null: the action declares no source)."
    )
    source: SourceView | None
    policy: dict[str, Any] = Field(description="The policy as applied when it was proposed.")
    approvals_required: int = Field(
        description="Distinct approvals required now (progress.required): never fewer than "
        "the policy recorded, more if the configured policy demands more today."
    )
    progress: ProgressDetail
    proposed_by: ProposedBy
    trace_id: str | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    approvals: list[DraftApproval]
    revisions: list[RevisionView]
    execution: ExecutionRef | None
    statement_to_sign: dict[str, Any] | None = Field(
        description="For approvers: the approve statement of the current revision to sign."
    )


def amount_of(draft: Draft) -> AmountView | None:
    if draft.amount_minor is None or not draft.currency:
        return None
    return AmountView.of(draft.amount_minor, draft.currency)
