"""One agent interaction, end to end: ``GET /v1/traces/{trace_id}``.

The trace id ties together the agent's tool calls and the drafts they created
or revised; the approvals and executions of those drafts (made by people and
workers under their own trace ids) are pulled in through the draft ids. The
steps come from the audit log, in chain order, so the story cannot disagree
with what the log proves.
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from service.approvals import repository as approvals_repository
from service.audit import errors, repository
from service.audit.models import AuditEvent
from service.audit.schemas import EventFilter, TraceStep, TraceView
from service.drafts import repository as drafts_repository
from service.executions import repository as executions_repository
from service.principal import Principal, Role
from service.sql import rfc3339


def trace(session: Session, principal: Principal, trace_id: str) -> TraceView:
    principal.require(Role.AUDITOR)
    tenant = principal.tenant
    direct = repository.events_matching(session, tenant, EventFilter(trace_id=trace_id))
    draft_ids = {e.draft_id for e in direct if e.draft_id} | drafts_repository.ids_traced(
        session, tenant, trace_id
    )
    events = {e.seq: e for e in direct}
    events.update({e.seq: e for e in repository.for_drafts(session, tenant, draft_ids)})
    if not events:
        raise errors.trace_unavailable()
    steps = [_step(events[seq]) for seq in sorted(events)]
    return TraceView(
        trace_id=trace_id,
        drafts=[_draft(session, tenant, draft_id) for draft_id in sorted(draft_ids)],
        steps=steps,
        diagnosis=diagnose([events[seq] for seq in sorted(events)]),
    )


def _draft(session: Session, tenant: str, draft_id: str) -> dict[str, Any]:
    draft = drafts_repository.get(session, tenant, draft_id)
    if draft is None:
        return {"draft_id": draft_id, "missing": True}
    execution = executions_repository.for_draft(session, draft_id)
    return {
        "draft_id": draft.id,
        "action": draft.action,
        "status": draft.status,
        "status_reason": draft.status_reason,
        "revisions": [
            {
                "revision": r.revision,
                "params_sha256": r.params_sha256,
                "summary": r.summary,
                "trace_id": r.trace_id,
                "at": rfc3339(r.created_at),
            }
            for r in drafts_repository.revisions(session, draft.id)
        ],
        "approvals": [
            {
                "approver": a.approver,
                "key_id": a.key_id,
                "decision": a.decision,
                "revision": a.revision,
                "reason": a.reason,
                "at": rfc3339(a.created_at),
            }
            for a in approvals_repository.for_draft(session, draft.id)
        ],
        "execution": None
        if execution is None
        else {
            "execution_id": execution.id,
            "status": execution.status,
            "outcome": execution.outcome,
            "error": execution.error,
            "attempts": [
                {
                    "number": a.number,
                    "result": a.result,
                    "detail": a.detail,
                    "started_at": rfc3339(a.started_at),
                    "finished_at": rfc3339(a.finished_at) if a.finished_at else None,
                }
                for a in executions_repository.attempts(session, execution.id)
            ],
        },
    }


def _step(event: AuditEvent) -> TraceStep:
    return TraceStep(
        seq=event.seq,
        at=rfc3339(event.at),
        type=event.type,
        actor=event.actor,
        draft_id=event.draft_id,
        execution_id=event.execution_id,
        summary=describe(event),
        data=event.data,
    )


def describe(event: AuditEvent) -> str:
    """One line a person can read in a timeline."""
    data = event.data
    error = data.get("error") or {}
    failure = f"{error.get('code')}: {error.get('message')}"
    attempt = f"attempt {data.get('attempt')}"
    match event.type:
        case "tool.called":
            latency = data.get("latency_us", 0) / 1000
            replay = " (replayed)" if data.get("replayed") else ""
            call = f"{data.get('tool')}{_args(data.get('arguments'))}"
            return f"{call} → ok{replay} in {latency:.1f} ms"
        case "tool.refused":
            return f"{data.get('tool')} refused: {failure}"
        case "draft.proposed" | "draft.revised":
            return f"revision {data.get('revision')}: {data.get('summary')} ({data.get('policy')})"
        case "draft.narrowed":
            return f"revision {data.get('revision')}: {data.get('reason')}"
        case "draft.rebased":
            return (
                f"revision {data.get('revision')} on the source's new state: {data.get('reason')}"
            )
        case "approval.approved" | "approval.rejected":
            verb = event.type.removeprefix("approval.")
            reason = f": {data['reason']}" if data.get("reason") else ""
            key = data.get("key_id")
            return f"{event.actor} {verb} revision {data.get('revision')} with key {key}{reason}"
        case "approval.granted":
            return (
                f"revision {data.get('revision')} covered by {data.get('approver')}'s standing "
                f"grant {data.get('grant_id')}"
            )
        case "execution.succeeded":
            return f"{attempt} succeeded: {(data.get('outcome') or {}).get('summary')}"
        case "execution.failed":
            return f"{attempt} failed: {failure}"
        case "execution.retry_scheduled":
            return f"{attempt} will be retried: {failure}"
        case "execution.started":
            return f"{attempt} started" + (" (took over)" if data.get("took_over") else "")
    if event.type.endswith("refused") and error:  # service.audit.refusals' naming
        return f"{event.type}: {failure}"
    return event.type


def diagnose(events: list[AuditEvent]) -> str:
    """Where the interaction ended — its last outcome — in the terms DESIGN.md asks an auditor
    to answer: success, or tool choice, arguments, refusal, timeout, human decision,
    downstream system."""
    for event in reversed(events):
        error = event.data.get("error") or {}
        code, category = error.get("code"), error.get("category")
        match event.type:
            case "execution.succeeded":
                return "succeeded: the change was executed"
            case "security.execution_refused":
                return "refused at execution: the approvals could not be verified"
            case "execution.failed":
                if category == "transient":
                    return f"downstream system: {error.get('message')}"
                return f"business rule at execution time: {error.get('message')}"
            case "draft.rejected":
                return f"human decision: rejected ({event.data.get('reason')})"
            case "draft.expired":
                return "expired before it was approved and executed"
            case "tool.refused":
                if code == "UNKNOWN_TOOL":
                    return f"tool choice: {error.get('message')}"
                if category == "invalid_argument":
                    return f"arguments: {error.get('message')}"
                if category == "transient":
                    return f"timeout or transient failure: {error.get('message')}"
                return f"refusal ({category}): {error.get('message')}"
    return "no failure recorded: the interaction is complete or still in progress"


def _args(arguments: Any) -> str:
    if not isinstance(arguments, dict):
        return "()"
    return "(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")"
