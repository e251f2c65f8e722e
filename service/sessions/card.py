"""The console's confirmation card: one draft in full, its change since the previous
revision, and the agent's trace that led to it (tool calls from the audit log, masked)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.approvals import progress
from service.approvals.schemas import Decision
from service.audit import repository as audit_repository
from service.audit.traces import describe
from service.drafts import repository as drafts_repository
from service.drafts import review
from service.drafts.models import DraftStatus
from service.drafts.schemas import DraftDetail
from service.money import AmountView, currency_exponent, render_amount
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sessions.signed import signed_view
from service.sql import rfc3339

# How many steps of the agent's trace a card shows (a runaway agent's trace can be long).
MAX_TRACE_STEPS = 200


@dataclass(frozen=True)
class Row:
    """One leaf of a JSON value: where it is (``amount``, ``items[0].sku``) and its text."""

    path: str
    text: str


@dataclass(frozen=True)
class Change:
    path: str
    before: str | None  # None: added
    after: str | None  # None: removed


@dataclass(frozen=True)
class Step:
    seq: int
    at: str
    type: str
    actor: str
    summary: str
    arguments: list[Row]
    outcome: str  # "ok", "refused: CODE", or "" for events that are not tool calls


@dataclass(frozen=True)
class Card:
    detail: DraftDetail
    # The amount of the signed params (never the stored amount columns), and why the stored
    # draft disagrees with its params (then nothing is offered to sign).
    amount: AmountView | None
    inconsistent: str | None
    params: list[Row]
    previous_revision: int | None
    changes: list[Change]
    previous_summary: str | None
    trace: list[Step]
    progress: progress.ApprovalProgress  # as the execute gate counts it
    # Why the signed-in person cannot approve / reject it now (None: they can).
    approve_blocked: str | None
    reject_blocked: str | None
    policy: str  # the policy and where the draft stands under it, in words


def card(
    session: Session,
    principal: Principal,
    draft_id: str,
    *,
    runtime: Runtime,
    now: datetime,
) -> Card:
    """Everything the card shows; for approvers and auditors of the draft's tenant."""
    detail, standing = review.detail_and_progress(
        session, principal, draft_id, runtime=runtime, now=now
    )
    signed = signed_view(
        runtime.registry,
        action=detail.action,
        params=detail.params,
        stored_sha256=detail.params_sha256,
        stored_amount=detail.amount,
    )
    approve_blocked = _blocked(principal, detail, standing, Decision.APPROVE, DraftStatus.PROPOSED)
    if signed.problem is not None and approve_blocked is None:
        approve_blocked = f"the stored draft does not match its params: {signed.problem}"
    revisions = drafts_repository.revisions(session, draft_id)
    previous = next((r for r in revisions if r.revision == detail.revision - 1), None)
    changes = diff(previous.params, detail.params) if previous is not None else []
    return Card(
        detail=detail,
        amount=signed.amount,
        inconsistent=signed.problem,
        params=rows(detail.params),
        previous_revision=previous.revision if previous is not None else None,
        changes=changes,
        previous_summary=previous.summary if previous is not None else None,
        trace=_trace(
            session,
            principal.tenant,
            {r.trace_id for r in revisions} | {detail.trace_id},
            actor=f"{Role.AGENT.value}:{detail.proposed_by.agent}",
        ),
        progress=standing,
        approve_blocked=approve_blocked,
        reject_blocked=_blocked(
            principal, detail, standing, Decision.REJECT, DraftStatus.PROPOSED, DraftStatus.APPROVED
        ),
        policy=policy_words(principal, detail, standing),
    )


def policy_words(
    principal: Principal, detail: DraftDetail, standing: progress.ApprovalProgress
) -> str:
    """'up to 500.00 USD: 1 approver; 0 of 1 so far': the policy as applied at proposal
    and the gate's count now (the progress owner's, like every number on the card)."""
    rule = str(detail.policy.get("rule") or detail.policy.get("name") or "its policy")
    words = f"{rule}; {standing.received} of {standing.required} so far"
    if principal.subject in standing.approvers:
        words += ", yours among them"
    if standing.required > int(detail.policy.get("approvals_required") or 0):
        words += f" (the policy configured today asks for {standing.required})"
    return words


# Why a decision or an execution is no longer possible, by the draft's status, in words.
WHERE_IT_STANDS: dict[DraftStatus, str] = {
    DraftStatus.PROPOSED: "the draft is still waiting for approval",
    DraftStatus.APPROVED: "the draft is already approved",
    DraftStatus.QUEUED: "the draft is queued for execution",
    DraftStatus.RUNNING: "the draft is being executed",
    DraftStatus.SUCCEEDED: "the draft has been executed",
    DraftStatus.FAILED: "the draft's execution failed",
    DraftStatus.REJECTED: "the draft was rejected",
    DraftStatus.EXPIRED: "the draft has expired",
    DraftStatus.WITHDRAWN: "the draft was withdrawn by the agent that proposed it",
}


def _blocked(
    principal: Principal,
    detail: DraftDetail,
    standing: progress.ApprovalProgress,
    decision: Decision,
    *open_in: DraftStatus,
) -> str | None:
    if principal.role is not Role.APPROVER:
        return "only approvers decide drafts"
    if detail.status not in open_in:
        return WHERE_IT_STANDS[detail.status]
    match standing.bar(principal.subject, decision):
        case progress.Bar.PROPOSER:
            return "you proposed this draft (maker and checker must differ)"
        case progress.Bar.ALREADY_SIGNED:
            return f"you have already signed revision {standing.revision}"
    return None


def rows(value: Any, path: str = "") -> list[Row]:
    """The leaves of a JSON value, in order; an amount of money is one leaf, rendered with
    its currency's ISO 4217 exponent ("12.50 USD (1250 minor units)")."""
    money = _money(value)
    if money is not None:
        return [Row(path or "(value)", money)]
    if isinstance(value, dict) and value:
        found: list[Row] = []
        for key, item in value.items():
            found += rows(item, f"{path}.{key}" if path else str(key))
        return found
    if isinstance(value, list) and value:
        found = []
        for index, item in enumerate(value):
            found += rows(item, f"{path}[{index}]")
        return found
    return [Row(path or "(value)", _text(value))]


def diff(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """What changed between two params objects, leaf by leaf (unchanged leaves omitted)."""
    old = {row.path: row.text for row in rows(before)}
    new = {row.path: row.text for row in rows(after)}
    paths = list(old) + [path for path in new if path not in old]
    return [
        Change(path, old.get(path), new.get(path))
        for path in paths
        if old.get(path) != new.get(path)
    ]


def _money(value: Any) -> str | None:
    if not (isinstance(value, dict) and set(value) == {"amount_minor", "currency"}):
        return None
    amount, currency = value["amount_minor"], value["currency"]
    if not isinstance(amount, int) or isinstance(amount, bool) or not isinstance(currency, str):
        return None
    try:
        currency_exponent(currency)
    except ValueError:
        return None
    return f"{render_amount(amount, currency)} ({amount} minor units)"


def _text(value: Any) -> str:
    """A leaf as text: strings as they are (the renderer makes them inert), the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _trace(session: Session, tenant: str, trace_ids: set[str | None], *, actor: str) -> list[Step]:
    """The proposing agent's tool calls in the traces that proposed or revised the draft
    (arguments as the audit log keeps them, masked) and their outcomes. Only that agent's:
    the trace id is the agent's choice, and another caller's events may carry it too."""
    events = audit_repository.tool_calls_in_traces(
        session, tenant, {t for t in trace_ids if t}, actor=actor, limit=MAX_TRACE_STEPS
    )
    steps = []
    for event in events:
        arguments = event.data.get("arguments") if event.type.startswith("tool.") else None
        error = event.data.get("error") or {}
        outcome = ""
        if event.type == "tool.called":
            outcome = "ok" + (" (replayed)" if event.data.get("replayed") else "")
        elif event.type == "tool.refused":
            outcome = f"refused: {error.get('code')} — {error.get('message')}"
        steps.append(
            Step(
                seq=event.seq,
                at=rfc3339(event.at),
                type=event.type,
                actor=event.actor,
                summary=describe(event),
                arguments=rows(arguments) if isinstance(arguments, dict) and arguments else [],
                outcome=outcome,
            )
        )
    return steps
