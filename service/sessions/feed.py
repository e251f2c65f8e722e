"""What the console's live views poll: drafts that changed, and one execution's status.

A stream remembers the last audit ``seq`` it has seen and asks for what came after, of a
few event types, in one index range per poll. Seqs are handed out under the tenant head's
lock at commit, so a later poll never finds an earlier seq it missed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from service.audit import repository as audit_repository
from service.executions import review as executions_review
from service.executions.models import FINISHED, ExecutionStatus
from service.principal import Principal, Role
from service.sessions import repository

# Audit event type -> what the inbox is told happened to the draft.
DRAFT_CHANGES = {
    "draft.proposed": "proposed",
    "draft.revised": "revised",
    "draft.rebased": "rebased",  # its source moved: a new revision to approve again
    "draft.narrowed": "revised",  # an approver lowered it: a new revision
    "approval.approved": "signed",  # one more signature, the quorum not (yet) met
    "approval.granted": "signed",  # a standing grant covered it: one approval counted
    "draft.approved": "approved",
    "draft.rejected": "rejected",
    "draft.expired": "expired",
    "draft.queued": "queued",
    "draft.running": "running",
    "draft.succeeded": "executed",
    "draft.failed": "failed",
    "draft.withdrawn": "withdrawn",
}
STATUS_AFTER = {
    "proposed": "proposed",
    "revised": "proposed",
    "rebased": "proposed",
    "signed": "proposed",
    "approved": "approved",
    "rejected": "rejected",
    "expired": "expired",
    "queued": "queued",
    "running": "running",
    "executed": "succeeded",
    "failed": "failed",
    "withdrawn": "withdrawn",
}
MAX_CHANGES = 100


@dataclass(frozen=True)
class DraftChange:
    seq: int
    draft_id: str
    status: str
    type: str

    def as_json(self) -> dict[str, str]:
        return {"draft_id": self.draft_id, "status": self.status, "type": self.type}


def head(session: Session, principal: Principal) -> int:
    """Where a new stream starts: the tenant's last seq (it reports only what comes after)."""
    principal.require(Role.APPROVER, Role.AUDITOR)
    return tenant_head(session, principal.tenant)


def draft_changes(
    session: Session, principal: Principal, *, after_seq: int
) -> tuple[list[DraftChange], int]:
    """The tenant's draft changes after ``after_seq``, and the seq to ask after next time."""
    principal.require(Role.APPROVER, Role.AUDITOR)
    return changes_after(session, principal.tenant, after_seq=after_seq)


def changes_after(
    session: Session, tenant: str, *, after_seq: int
) -> tuple[list[DraftChange], int]:
    """``draft_changes`` for a caller that filters by principal itself (the MCP door's push
    hub, which serves many agents of a tenant: each hears only of its own drafts)."""
    events = repository.events_after(
        session, tenant, after_seq=after_seq, types=DRAFT_CHANGES, limit=MAX_CHANGES
    )
    changes = [
        DraftChange(
            seq=event.seq,
            draft_id=event.draft_id,
            status=STATUS_AFTER[DRAFT_CHANGES[event.type]],
            type=DRAFT_CHANGES[event.type],
        )
        for event in events
        if event.draft_id
    ]
    return changes, (events[-1].seq if events else after_seq)


def tenant_head(session: Session, tenant: str) -> int:
    """The tenant's last seq, for a caller that checks the principal itself."""
    return audit_repository.head_seq(session, tenant)


def execution_status(session: Session, principal: Principal, execution_id: str) -> ExecutionStatus:
    """One execution's status now (same rules as ``GET /v1/executions/{id}``)."""
    return executions_review.get(session, principal, execution_id).status


def finished(status: ExecutionStatus) -> bool:
    return status in FINISHED
