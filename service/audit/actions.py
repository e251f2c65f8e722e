"""Audit use cases: record an event, verify a tenant's chain."""

from __future__ import annotations

from contextlib import closing
from dataclasses import replace
from typing import Any

from sqlmodel import Session

from service.audit import chain, checkpoints, repository
from service.audit.chain import GENESIS_HASH
from service.audit.verification import Verification, stored_chain, verify_chain


def record(
    session: Session,
    *,
    tenant: str,
    actor: str,
    type: str,
    data: dict[str, Any] | None = None,
    draft_id: str | None = None,
    execution_id: str | None = None,
    trace_id: str | None = None,
) -> None:
    """Record an event in the current unit of work (it commits with the change it describes).

    ``data`` must already be masked: no secrets, no raw PII.
    """
    chain.record(
        session,
        chain.RecordedEvent(
            tenant=tenant,
            actor=actor,
            type=type,
            data=data or {},
            draft_id=draft_id,
            execution_id=execution_id,
            trace_id=trace_id,
        ),
    )


def verify(
    session: Session, tenant: str, *, checkpoint_public_key: str | None = None
) -> Verification:
    """Recompute the tenant's chain; check it ends at the recorded head and agrees with every
    signed checkpoint. Use a ``read_scope`` session, so the walk and the head are one snapshot.
    """
    head = repository.get_head(session, tenant)
    recorded = (head.seq, head.hash) if head is not None else (0, GENESIS_HASH)
    stored = [checkpoints.as_dict(c) for c in checkpoints.for_tenant(session, tenant)]
    # closing(): an early return on the first bad event must still release the DB cursor.
    with closing(stored_chain(session, tenant)) as events:
        result = verify_chain(
            events,
            recorded_head=recorded,
            checkpoints=stored if checkpoint_public_key else (),
            checkpoint_public_key=checkpoint_public_key,
        )
    if result.ok and stored and not checkpoint_public_key:
        # Fail closed: without the key the checkpoints prove nothing, and a history that
        # only they could expose must not pass as verified.
        return replace(
            result,
            ok=False,
            problem=f"{len(stored)} checkpoints exist but no checkpoint public key is "
            "configured to check them (DRAFTGATE_CHECKPOINT_PUBLIC_KEY)",
        )
    return result
