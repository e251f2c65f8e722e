"""Is the audit log anchored? Checkpoints that stop, or that the signer refused, are reported
by readiness, by ``draftgate doctor`` and by verification, never only logged."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func
from sqlmodel import Session, col, select

from service.audit.checkpoints import REFUSED_EVENT, latest_for, trusted_public_key
from service.audit.models import AuditEvent, AuditHead
from service.config import Settings


@dataclass(frozen=True)
class TenantAnchor:
    tenant: str
    head_seq: int
    checkpoint_seq: int
    problem: str | None  # None: anchored (or nothing to anchor yet)


@dataclass(frozen=True)
class CheckpointHealth:
    ok: bool
    detail: str
    tenants: list[TenantAnchor]


def checkpoint_health(session: Session, settings: Settings, *, now: datetime) -> CheckpointHealth:
    """Every tenant's chain must be checkpointed within twice the interval, by the trusted key,
    with no refused checkpoint since the last good one."""
    if not trusted_public_key(settings):
        return CheckpointHealth(
            False,
            "no checkpoint key is configured (DRAFTGATE_CHECKPOINT_PUBLIC_KEY or the key file): "
            "nothing proves the log was not truncated",
            [],
        )
    overdue = now - timedelta(seconds=2 * settings.checkpoint_interval_seconds)
    tenants = [
        tenant_anchor(session, head, overdue=overdue)
        for head in session.exec(select(AuditHead).where(col(AuditHead.seq) > 0)).all()
    ]
    problems = [f"{t.tenant}: {t.problem}" for t in tenants if t.problem]
    return CheckpointHealth(not problems, "; ".join(problems) or "ok", tenants)


def tenant_anchor(session: Session, head: AuditHead, *, overdue: datetime) -> TenantAnchor:
    latest = latest_for(session, head.tenant)
    anchored = latest.seq if latest else 0
    refused = session.exec(
        select(func.max(AuditEvent.seq)).where(
            col(AuditEvent.tenant) == head.tenant, col(AuditEvent.type) == REFUSED_EVENT
        )
    ).one()
    if refused is not None and refused > anchored:
        return TenantAnchor(
            head.tenant,
            head.seq,
            anchored,
            f"the checkpoint signer refused the chain (seq {refused})",
        )
    oldest_unanchored = session.exec(
        select(AuditEvent.at).where(
            col(AuditEvent.tenant) == head.tenant, col(AuditEvent.seq) == anchored + 1
        )
    ).first()
    if oldest_unanchored is not None and oldest_unanchored < overdue:
        return TenantAnchor(
            head.tenant,
            head.seq,
            anchored,
            f"events since seq {anchored + 1} are older than twice the checkpoint interval "
            "and not checkpointed: is the beat and its checkpoint key running?",
        )
    return TenantAnchor(head.tenant, head.seq, anchored, None)


def anchoring_problem(
    session: Session, settings: Settings, tenant: str, *, now: datetime
) -> str | None:
    """Why one tenant's chain is not being anchored, or None."""
    if not trusted_public_key(settings):
        return "no checkpoint key is configured"
    head = session.get(AuditHead, tenant)
    if head is None or head.seq == 0:
        return None
    overdue = now - timedelta(seconds=2 * settings.checkpoint_interval_seconds)
    return tenant_anchor(session, head, overdue=overdue).problem
