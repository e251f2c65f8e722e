"""Signed checkpoints of the chain head (Ed25519, key in a file outside the database).

Statement signed: JCS({"type": "draftgate.checkpoint.v1", "tenant", "seq", "hash", "at"})
with ``at`` in RFC 3339 UTC, microseconds. A checkpoint is checked against the
chain by comparing the event at ``seq``: a different hash means history was
rewritten at or before ``seq``; a chain ending before ``seq`` was truncated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlmodel import Session, col, select

from service.audit import errors
from service.audit.chain import GENESIS_HASH, RecordedEvent, event_hash, record
from service.audit.models import AuditCheckpoint, AuditEvent, AuditHead
from service.canonical import canonical_json
from service.config import Settings
from service.signing import (
    generate_private_key,
    key_id_for,
    load_private_key,
    public_key_b64,
    sign,
    verify,
    write_private_key,
)
from service.sql import rfc3339

logger = logging.getLogger(__name__)

STATEMENT_TYPE = "draftgate.checkpoint.v1"


def statement(tenant: str, seq: int, hash_: str, at: datetime | str) -> dict[str, Any]:
    return {
        "type": STATEMENT_TYPE,
        "tenant": tenant,
        "seq": seq,
        "hash": hash_,
        "at": at if isinstance(at, str) else rfc3339(at),
    }


def load_key(path: Path) -> Ed25519PrivateKey:
    try:
        return load_private_key(path)
    except FileNotFoundError:
        raise errors.checkpoint_key_missing(path) from None


def trusted_public_key(settings: Settings) -> str | None:
    """The public key checkpoints are verified with: configured, or from the key file."""
    if settings.checkpoint_public_key:
        return settings.checkpoint_public_key
    path = settings.resolved_checkpoint_key_file()
    try:
        return public_key_b64(load_private_key(path)) if path.exists() else None
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm):
        # An unusable key file trusts nothing: no checkpoint verifies, so nothing reads as
        # anchored (fail closed), and readiness and doctor say what is wrong with the file.
        return None


def ensure_key(path: Path) -> Ed25519PrivateKey:
    """The checkpoint key, generated (mode 0600) if the file does not exist yet."""
    if not path.exists():
        write_private_key(generate_private_key(), path)
    return load_private_key(path)


def create(
    session: Session, key: Ed25519PrivateKey, *, now: datetime, tenant: str | None = None
) -> list[AuditCheckpoint]:
    """Sign the current head of every tenant (or one) that moved since its last checkpoint.

    The signer trusts no row: it first re-verifies the chain from the last checkpoint to
    the head. A segment that does not link is not signed (a signature would launder it);
    a ``security.checkpoint_refused`` event is recorded instead, and readiness reports it.
    """
    public = public_key_b64(key)
    query = select(AuditHead).where(col(AuditHead.seq) > 0)
    if tenant is not None:
        query = query.where(col(AuditHead.tenant) == tenant)
    created = []
    for head in session.exec(query).all():
        latest = latest_for(session, head.tenant)
        if latest is not None and latest.seq >= head.seq:
            continue
        problem = segment_problem(session, head, since=latest)
        if problem is not None:
            _refuse(session, head, latest, problem)
            continue
        signature = sign(key, canonical_json(statement(head.tenant, head.seq, head.hash, now)))
        checkpoint = AuditCheckpoint(
            tenant=head.tenant,
            seq=head.seq,
            hash=head.hash,
            at=now,
            key_id=key_id_for(public),
            signature=signature,
        )
        session.add(checkpoint)
        created.append(checkpoint)
    session.flush()
    return created


REFUSED_EVENT = "security.checkpoint_refused"


def segment_problem(
    session: Session, head: AuditHead, *, since: AuditCheckpoint | None
) -> str | None:
    """Why the events after ``since`` (or all of them) do not lead to ``head``, or None."""
    expected_seq = (since.seq if since else 0) + 1
    previous = since.hash if since else GENESIS_HASH
    events = session.exec(
        select(AuditEvent)
        .where(col(AuditEvent.tenant) == head.tenant, col(AuditEvent.seq) >= expected_seq)
        .order_by(col(AuditEvent.seq))
        .execution_options(yield_per=1_000)
    )
    with closing(events):  # a server-side cursor: released even when the walk stops early
        for event in events:
            if event.seq != expected_seq:
                return f"expected seq {expected_seq}, found {event.seq}"
            if event.prev_hash != previous or event_hash(event) != event.hash:
                return f"the event at seq {event.seq} does not link to the one before it"
            expected_seq, previous = expected_seq + 1, event.hash
            if event.seq == head.seq:
                break
    if (expected_seq - 1, previous) != (head.seq, head.hash):
        return f"the chain ends at seq {expected_seq - 1}, but the head records seq {head.seq}"
    return None


def _refuse(
    session: Session, head: AuditHead, latest: AuditCheckpoint | None, problem: str
) -> None:
    logger.error("audit chain of %s does not verify; not signing it: %s", head.tenant, problem)
    record(
        session,
        RecordedEvent(
            tenant=head.tenant,
            actor="system:checkpoint",
            type=REFUSED_EVENT,
            data={
                "problem": problem,
                "head_seq": head.seq,
                "last_checkpoint_seq": latest.seq if latest else 0,
            },
        ),
    )


def latest_for(session: Session, tenant: str) -> AuditCheckpoint | None:
    query = (
        select(AuditCheckpoint)
        .where(col(AuditCheckpoint.tenant) == tenant)
        .order_by(col(AuditCheckpoint.seq).desc())
        .limit(1)
    )
    return session.exec(query).first()


def for_tenant(session: Session, tenant: str) -> list[AuditCheckpoint]:
    query = (
        select(AuditCheckpoint)
        .where(col(AuditCheckpoint.tenant) == tenant)
        .order_by(col(AuditCheckpoint.seq))
    )
    return list(session.exec(query).all())


def as_dict(checkpoint: AuditCheckpoint) -> dict[str, Any]:
    return {
        **statement(checkpoint.tenant, checkpoint.seq, checkpoint.hash, checkpoint.at),
        "key_id": checkpoint.key_id,
        "signature": checkpoint.signature,
    }


@dataclass(frozen=True)
class CheckpointProblem:
    seq: int
    problem: str


def check(
    checkpoints: Iterable[Mapping[str, Any]],
    *,
    hashes_at: Mapping[int, str],
    last_seq: int,
    public_key: str,
) -> CheckpointProblem | None:
    """The first checkpoint the chain contradicts (by seq), or None.

    ``hashes_at`` maps seq → hash for (at least) every checkpointed seq the chain
    reaches; ``last_seq`` is where the chain ends. A checkpoint whose signature
    does not verify with ``public_key`` is itself a problem: it was not made by
    the checkpoint key.
    """
    trusted_key_id = key_id_for(public_key)
    for checkpoint in sorted(checkpoints, key=lambda c: int(c["seq"])):
        seq = int(checkpoint["seq"])
        signed = statement(checkpoint["tenant"], seq, checkpoint["hash"], checkpoint["at"])
        if checkpoint.get("key_id") != trusted_key_id or not verify(
            public_key, canonical_json(signed), str(checkpoint.get("signature", ""))
        ):
            return CheckpointProblem(
                seq, f"checkpoint at seq {seq} is not signed by the checkpoint key"
            )
        if seq > last_seq:
            return CheckpointProblem(
                last_seq + 1,
                f"the chain ends at seq {last_seq} but was checkpointed at seq {seq}: truncated",
            )
        if hashes_at.get(seq) != checkpoint["hash"]:
            return CheckpointProblem(
                seq,
                f"the event at seq {seq} differs from its checkpoint: history rewritten "
                f"at or before seq {seq}",
            )
    return None
