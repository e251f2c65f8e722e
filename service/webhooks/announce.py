"""Which deliveries the events a unit of work appended to the audit chain announce.

The unit of work calls ``announce`` with the events its append has just joined to the
chains (service.db.session_scope, right after ``chain.append_recorded``, before the commit),
so every announced change (a draft proposed, approved, …) gets its delivery rows exactly
when it commits, whichever door or process made it, and a rolled-back change announces
nothing. The rows themselves are written by their owner (service.webhooks.state). The cost
on the hot path: a set lookup per event, and one indexed query on ``webhook_endpoints`` per
tenant only for units that append an announced event.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session

from service.drafts.models import Draft
from service.executions.models import Execution
from service.webhooks import repository, state
from service.webhooks.schemas import WEBHOOK_EVENT_FOR


def announce(session: Session, appended: Sequence[dict[str, Any]]) -> None:
    """Register a pending delivery for each announced event of ``appended`` (the rows the
    chain appended, as ``chain.append_recorded`` returns them) and each endpoint of its
    tenant subscribed to it."""
    announced = [event for event in appended if event["type"] in WEBHOOK_EVENT_FOR]
    tenants = sorted({event["tenant"] for event in announced})
    deliveries = []
    for tenant in tenants:
        endpoints = repository.active_endpoints(session, tenant)
        if not endpoints:
            continue
        for event in (event for event in announced if event["tenant"] == tenant):
            event_type = WEBHOOK_EVENT_FOR[event["type"]]
            facts = _facts(session, event_type, event)
            deliveries += [
                state.pending(endpoint, event_type, facts, at=event["at"])
                for endpoint in endpoints
                if event_type in endpoint.events
            ]
    state.register(session, deliveries)


def _facts(session: Session, event_type: str, event: dict[str, Any]) -> dict[str, Any]:
    """The ids a payload carries, from the event and the rows it is about (already loaded in
    this unit of work: it just changed them)."""
    draft_id, execution_id = event["draft_id"], event["execution_id"]
    revision, action = event["data"].get("revision"), None
    if execution_id is not None and event_type.startswith("execution."):
        execution = session.get(Execution, execution_id)
        if execution is not None:
            revision, action = execution.revision, execution.action
    if action is None and draft_id is not None:
        draft = session.get(Draft, draft_id)
        if draft is not None:
            action = draft.action
            revision = revision if isinstance(revision, int) else draft.revision
    return {
        "draft_id": draft_id,
        "execution_id": execution_id,
        "revision": revision if isinstance(revision, int) else None,
        "action": action,
        "subject_status": event_type.split(".", 1)[1],
        "audit_seq": event["seq"],
    }
