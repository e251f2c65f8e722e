"""The auditor's oversight page (issue 21.4, docs/metrics.md "Oversight"): per approver and
per action over the last days, how carefully drafts were reviewed, from the decisions'
review rows and the ``oversight.flagged`` events. Auditors only; their tenant only."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median, quantiles

from sqlmodel import Session, col, select

from service.approvals.models import DraftReview
from service.audit.models import AuditEvent
from service.principal import Principal, Role

DAYS = 30
MAX_ROWS = 20_000  # a page, not a report: beyond this the oldest decisions are left out


@dataclass(frozen=True)
class ApproverCare:
    approver: str
    decisions: int
    viewed: int  # decisions with a recorded view (the dwell figures are theirs)
    median_dwell_s: float | None
    low_dwell_s: float | None  # the 10th percentile: the quickest reviews
    hasty: int
    flags: int


@dataclass(frozen=True)
class ActionLatency:
    action: str
    decisions: int
    median_s: float
    p90_s: float


@dataclass(frozen=True)
class Oversight:
    days: int
    approvers: list[ApproverCare]
    actions: list[ActionLatency]
    truncated: bool


def summary(session: Session, principal: Principal, *, now: datetime) -> Oversight:
    principal.require(Role.AUDITOR)
    since = now - timedelta(days=DAYS)
    rows = list(
        session.exec(
            select(DraftReview)
            .where(
                col(DraftReview.tenant) == principal.tenant,
                col(DraftReview.decided_at) >= since,
            )
            .order_by(col(DraftReview.decided_at).desc())
            .limit(MAX_ROWS + 1)
        ).all()
    )
    truncated = len(rows) > MAX_ROWS
    rows = rows[:MAX_ROWS]
    flags = _flags(session, principal.tenant, since)
    by_approver: dict[str, list[DraftReview]] = defaultdict(list)
    by_action: dict[str, list[DraftReview]] = defaultdict(list)
    for row in rows:
        by_approver[row.approver].append(row)
        by_action[row.action].append(row)
    return Oversight(
        days=DAYS,
        approvers=[
            _care(approver, decided, flags.get(approver, 0))
            for approver, decided in sorted(by_approver.items())
        ],
        actions=[_latency(action, decided) for action, decided in sorted(by_action.items())],
        truncated=truncated,
    )


def _care(approver: str, decided: list[DraftReview], flags: int) -> ApproverCare:
    dwells = sorted(r.dwell_ms / 1000 for r in decided if r.dwell_ms is not None)
    return ApproverCare(
        approver=approver,
        decisions=len(decided),
        viewed=len(dwells),
        median_dwell_s=round(median(dwells), 1) if dwells else None,
        low_dwell_s=round(_quantile(dwells, 0.1), 1) if dwells else None,
        hasty=sum(1 for r in decided if r.hasty),
        flags=flags,
    )


def _latency(action: str, decided: list[DraftReview]) -> ActionLatency:
    latencies = sorted((r.latency_ms or 0) / 1000 for r in decided)
    return ActionLatency(
        action=action,
        decisions=len(decided),
        median_s=round(median(latencies), 1),
        p90_s=round(_quantile(latencies, 0.9), 1),
    )


def _quantile(ordered: list[float], q: float) -> float:
    if len(ordered) < 2:
        return ordered[0]
    cuts = quantiles(ordered, n=100, method="inclusive")
    return cuts[max(0, min(98, round(q * 100) - 1))]


def _flags(session: Session, tenant: str, since: datetime) -> dict[str, int]:
    statement = select(AuditEvent).where(
        col(AuditEvent.tenant) == tenant,
        col(AuditEvent.type) == "oversight.flagged",
        col(AuditEvent.at) >= since,
    )
    counted: dict[str, int] = defaultdict(int)
    for event in session.exec(statement).all():
        counted[str(event.data.get("approver"))] += 1
    return dict(counted)
