"""Oversight (issue 21.4, docs/metrics.md "Oversight"): how carefully drafts are reviewed.

For each decision an approver signs, one ``draft_reviews`` row says when they first saw the
revision (the console reports it when the card opens, the CLI when it fetches the draft to
sign), whether they looked at its params and at the record it changes, and the dwell (first
view to signature) and decision latency (proposal to decision). Both are Prometheus
histograms and part of the decision's audit event.

Where the action's policy asks for it (``oversight``), an approval faster than
``min_dwell_seconds``, or without any recorded view, is *hasty*; an approver whose hasty
approvals within ``window_seconds``, counted since their last flag, reach ``flag_after`` is
flagged with an audited ``oversight.flagged`` event. A draft still waiting after
``escalate_after_seconds`` is escalated once (``draft.escalated``, announced to webhooks), by
the sweeper.

None of this decides anything: it measures care, it never counts an approval or refuses one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import Field
from sqlalchemy import func
from sqlmodel import Session, col, select

from service import metrics
from service.approvals.models import DraftReview
from service.approvals.signed import Rules
from service.audit import actions as audit
from service.audit.models import AuditEvent
from service.drafts import repository as drafts_repository
from service.drafts.errors import draft_unavailable
from service.drafts.models import Draft, DraftStatus
from service.policies.schemas import OversightRules, PolicyConfig
from service.principal import Principal, Role
from service.sql import insert_or_ignore
from service.validation import StrictInput

ESCALATED = "draft.escalated"
FLAGGED = "oversight.flagged"
ACTOR = "system:oversight"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ESCALATE_BATCH = 200


class ViewReport(StrictInput):
    """Body of POST /v1/drafts/{id}/views: the revision on screen, and the sections seen."""

    revision: int = Field(ge=1, le=1_000_000)
    seen: list[Literal["params", "source"]] = Field(default_factory=list, max_length=2)


def record_view(
    session: Session, principal: Principal, draft_id: str, report: ViewReport, *, now: datetime
) -> None:
    """The approver has the draft's revision in front of them (and these sections). A view of
    a revision that is no longer current records nothing: it is not what they would sign."""
    principal.require(Role.APPROVER)
    draft = drafts_repository.get(session, principal.tenant, draft_id)
    if draft is None:
        raise draft_unavailable()
    if report.revision != draft.revision or draft.status is not DraftStatus.PROPOSED:
        return
    review = _review(session, draft, principal.subject)
    review.first_viewed_at = review.first_viewed_at or now
    if "params" in report.seen:
        review.params_seen_at = review.params_seen_at or now
    if "source" in report.seen:
        review.source_seen_at = review.source_seen_at or now
    session.add(review)


def carry_view(session: Session, draft: Draft, approver: str, *, from_revision: int) -> None:
    """The approver's view of an earlier revision counts for the one they wrote from it (they
    narrowed what they were reading)."""
    earlier = session.get(DraftReview, (draft.id, from_revision, approver))
    if earlier is None or earlier.first_viewed_at is None:
        return
    review = _review(session, draft, approver)
    review.first_viewed_at = earlier.first_viewed_at
    review.params_seen_at = earlier.params_seen_at
    review.source_seen_at = earlier.source_seen_at
    session.add(review)


@dataclass(frozen=True)
class Measure:
    """One decision's oversight, as its audit event records it."""

    dwell_ms: int | None
    latency_ms: int
    params_seen: bool
    source_seen: bool
    hasty: bool

    def as_data(self) -> dict[str, Any]:
        return {
            "dwell_ms": self.dwell_ms,
            "latency_ms": self.latency_ms,
            "params_seen": self.params_seen,
            "source_seen": self.source_seen,
            "hasty": self.hasty,
        }


def decided(
    session: Session,
    rules: Rules,
    principal: Principal,
    draft: Draft,
    decision: str,
    *,
    now: datetime,
    trace_id: str | None,
) -> Measure:
    """Measure the decision ``principal`` just signed on the draft's current revision; flag
    the approver if it makes one hasty decision too many."""
    review = _review(session, draft, principal.subject)
    watch = _rules_of(rules.policies, draft.action)
    dwell = _ms(now - review.first_viewed_at) if review.first_viewed_at else None
    latency = _ms(now - draft.created_at)
    # Rubber-stamping is approving unread: a quick rejection lets nothing run.
    hasty = (
        watch is not None
        and decision == "approve"
        and (dwell is None or dwell < watch.min_dwell_seconds * 1000)
    )
    review.decided_at, review.decision = now, decision
    review.dwell_ms, review.latency_ms, review.hasty = dwell, latency, hasty
    session.add(review)
    session.flush()
    metrics.decision_reviewed(session, draft.action, decision, dwell, latency)
    if hasty and watch is not None:
        _flag_if_due(session, principal, draft, watch, now=now, trace_id=trace_id)
    return Measure(
        dwell_ms=dwell,
        latency_ms=latency,
        params_seen=review.params_seen_at is not None,
        source_seen=review.source_seen_at is not None,
        hasty=hasty,
    )


def _flag_if_due(
    session: Session,
    principal: Principal,
    draft: Draft,
    watch: OversightRules,
    *,
    now: datetime,
    trace_id: str | None,
) -> None:
    """Flag the approver once their hasty decisions since the later of the window's start
    and their last flag reach ``flag_after`` (``>=``: decisions committed together cannot
    step over the threshold unseen)."""
    since = max(now - timedelta(seconds=watch.window_seconds), _last_flag(session, principal))
    hasty = session.exec(
        select(func.count())
        .select_from(DraftReview)
        .where(
            col(DraftReview.tenant) == principal.tenant,
            col(DraftReview.approver) == principal.subject,
            col(DraftReview.decided_at) > since,
            col(DraftReview.hasty).is_(True),
        )
    ).one()
    if hasty < watch.flag_after:
        return
    audit.record(
        session,
        tenant=principal.tenant,
        actor=ACTOR,
        type=FLAGGED,
        draft_id=draft.id,
        trace_id=trace_id,
        data={
            "approver": principal.subject,
            "hasty_decisions": int(hasty),
            "window_seconds": watch.window_seconds,
            "min_dwell_seconds": watch.min_dwell_seconds,
            "why": f"{hasty} decisions within {watch.window_seconds} s, each signed less than "
            f"{watch.min_dwell_seconds} s after the draft was first shown (or never shown)",
        },
    )
    metrics.oversight_flagged(session, draft.action)


def _last_flag(session: Session, principal: Principal) -> datetime:
    """When the approver was last flagged (the epoch if never)."""
    statement = (
        select(AuditEvent)
        .where(
            col(AuditEvent.tenant) == principal.tenant,
            col(AuditEvent.type) == FLAGGED,
            col(AuditEvent.actor) == ACTOR,
        )
        .order_by(col(AuditEvent.seq).desc())
        .limit(50)
    )
    for event in session.exec(statement).all():
        if event.data.get("approver") == principal.subject:
            return event.at
    return EPOCH


def escalate_waiting(session: Session, policies: dict[str, PolicyConfig], *, now: datetime) -> int:
    """Escalate, once each, the drafts still waiting for approval longer than their policy's
    ``escalate_after_seconds`` (the sweeper's; announced to webhooks as ``draft.escalated``)."""
    escalated = 0
    for action, policy in sorted(policies.items()):
        watch = policy.oversight
        if watch is None or watch.escalate_after_seconds is None:
            continue
        cutoff = now - timedelta(seconds=watch.escalate_after_seconds)
        for draft in _not_escalated(session, action, cutoff):
            audit.record(
                session,
                tenant=draft.tenant,
                actor=ACTOR,
                type=ESCALATED,
                draft_id=draft.id,
                data={
                    "waiting_seconds": int((now - draft.created_at).total_seconds()),
                    "escalate_after_seconds": watch.escalate_after_seconds,
                    "revision": draft.revision,
                    "summary": draft.summary,
                },
            )
            escalated += 1
    return escalated


def _not_escalated(session: Session, action: str, cutoff: datetime) -> list[Draft]:
    """Proposed drafts of ``action`` created before ``cutoff`` and not escalated yet, oldest
    first (all tenants): the escalated ones are left out by the query itself, so drafts kept
    open and escalated long ago never crowd out newer ones."""
    escalated = (
        select(col(AuditEvent.seq))
        .where(col(AuditEvent.draft_id) == col(Draft.id), col(AuditEvent.type) == ESCALATED)
        .exists()
    )
    statement = (
        select(Draft)
        .where(
            col(Draft.action) == action,
            col(Draft.status) == DraftStatus.PROPOSED,
            col(Draft.created_at) <= cutoff,
            ~escalated,
        )
        .order_by(col(Draft.created_at))
        .limit(ESCALATE_BATCH)
    )
    return list(session.exec(statement).all())


def _review(session: Session, draft: Draft, approver: str) -> DraftReview:
    """The approver's review row of the draft's current revision, made if missing (by a
    concurrent request too: insert-or-ignore, then read it locked)."""
    key = {"draft_id": draft.id, "revision": draft.revision, "approver": approver}
    insert_or_ignore(
        session,
        DraftReview.__table__,  # type: ignore[attr-defined]
        {**key, "tenant": draft.tenant, "action": draft.action, "hasty": False},
    )
    review = session.get(
        DraftReview,
        (draft.id, draft.revision, approver),
        with_for_update=True,
        populate_existing=True,
    )
    assert review is not None
    return review


def _rules_of(policies: dict[str, PolicyConfig], action: str) -> OversightRules | None:
    policy = policies.get(action)
    return policy.oversight if policy else None


def _ms(span: timedelta) -> int:
    return max(int(span.total_seconds() * 1000), 0)
