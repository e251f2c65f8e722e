"""Verifying a tenant's chain: by the server from the database, or offline from an export.

One walk serves both: recompute every event's hash, check each links to the one
before, then compare the end of the chain with the recorded head (server) and
with signed checkpoints (both), which catch a rewritten-and-rechained or a
truncated history that a hash chain alone cannot.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, select
from sqlmodel import Session

from service.audit.chain import GENESIS_HASH, event_hash
from service.audit.checkpoints import check
from service.audit.models import AuditEvent

_EVENTS: Table = AuditEvent.__table__  # type: ignore[attr-defined]
# Exactly the exported fields (docs/audit.md): what is hashed, plus the hash itself.
_CHAIN_COLUMNS = tuple(
    _EVENTS.c[name]
    for name in (
        "seq",
        "at",
        "tenant",
        "actor",
        "type",
        "draft_id",
        "execution_id",
        "trace_id",
        "data",
        "prev_hash",
        "hash",
    )
)
_BATCH = 1_000


@dataclass(frozen=True)
class Verification:
    ok: bool
    events_checked: int
    head_seq: int
    head_hash: str
    first_bad_seq: int | None
    problem: str | None = None
    checkpoints_checked: int = 0
    # The last seq a verified, signed checkpoint covers. Events after it are unanchored:
    # deleting them (truncating the tail) cannot be detected.
    anchored_seq: int = 0
    checkpoint_problem: str | None = None  # e.g. checkpoints overdue (server side)

    @property
    def anchored(self) -> bool:
        """A verified, signed checkpoint covers the last event. An empty chain with no
        checkpoint is not anchored either: it may be a log truncated to nothing."""
        return self.ok and self.checkpoints_checked > 0 and self.anchored_seq == self.head_seq

    def report(self) -> dict[str, Any]:
        """The shape of ``GET /v1/audit/verify`` and ``draftgate audit verify --json``."""
        return {
            "ok": self.ok,
            "events_checked": self.events_checked,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "first_bad_seq": self.first_bad_seq,
            "problem": self.problem,
            "checkpoints_checked": self.checkpoints_checked,
            "anchored": self.anchored,
            "anchored_seq": self.anchored_seq,
            "checkpoint_problem": self.checkpoint_problem,
        }


def stored_chain(session: Session, tenant: str) -> Generator[dict[str, Any]]:
    """One tenant's chain from the database, oldest first, as plain dicts of the exported
    fields: one Core ``SELECT`` streamed in batches (constant memory), no ORM objects, whose
    identity map and ``model_dump`` cost more than hashing the event does."""
    statement = (
        select(*_CHAIN_COLUMNS)
        .where(_EVENTS.c.tenant == tenant)
        .order_by(_EVENTS.c.seq)
        .execution_options(yield_per=_BATCH)
    )
    result = session.execute(statement)
    try:
        names = tuple(result.keys())
        for row in result:
            yield dict(zip(names, row, strict=True))
    finally:
        result.close()


def verify_chain(
    events: Iterable[Mapping[str, Any]],
    *,
    recorded_head: tuple[int, str] | None = None,
    checkpoints: Sequence[Mapping[str, Any]] = (),
    checkpoint_public_key: str | None = None,
) -> Verification:
    """Walk one tenant's events in ``seq`` order from seq 1 and find the first bad one."""
    remember = {int(c["seq"]) for c in checkpoints}
    hashes_at: dict[int, str] = {}
    expected_seq, previous, checked = 1, GENESIS_HASH, 0
    for event in events:
        seq = int(event["seq"])
        problem = None
        if seq != expected_seq:
            problem = f"expected seq {expected_seq}, found {seq}: an event is missing or moved"
        elif event["prev_hash"] != previous:
            problem = "prev_hash does not match the previous event's hash"
        elif event_hash(event if isinstance(event, dict) else dict(event)) != event["hash"]:
            problem = "the hash does not match the event's contents"
        if problem:
            return Verification(False, checked, expected_seq - 1, previous, expected_seq, problem)
        if seq in remember:
            hashes_at[seq] = str(event["hash"])
        checked += 1
        expected_seq, previous = expected_seq + 1, str(event["hash"])
    last_seq = expected_seq - 1

    if recorded_head is not None and recorded_head != (last_seq, previous):
        return Verification(
            False,
            checked,
            last_seq,
            previous,
            last_seq + 1,
            f"the chain ends at seq {last_seq} but the head records seq {recorded_head[0]}",
        )
    if checkpoints:
        if checkpoint_public_key is None:
            raise ValueError("checking checkpoints needs the checkpoint public key")
        contradiction = check(
            checkpoints, hashes_at=hashes_at, last_seq=last_seq, public_key=checkpoint_public_key
        )
        if contradiction is not None:
            return Verification(
                False,
                checked,
                last_seq,
                previous,
                contradiction.seq,
                contradiction.problem,
                len(checkpoints),
            )
    anchored = max((int(c["seq"]) for c in checkpoints), default=0)
    return Verification(
        True, checked, last_seq, previous, None, None, len(checkpoints), anchored_seq=anchored
    )
