"""Which contract_version a gateway write action has: recorded per contract digest."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from service.db import session_scope
from service.gateway.models import GatewayContract
from service.sql import insert_or_ignore, utcnow


def current(session: Session, action: str) -> GatewayContract | None:
    statement = (
        select(GatewayContract)
        .where(GatewayContract.action == action)
        .order_by(col(GatewayContract.contract_version).desc())
        .limit(1)
    )
    return session.exec(statement).first()


def version_for(session: Session, *, action: str, contract_sha256: str, base: int) -> int:
    """The version of this contract: the current one if the digest is unchanged (and at
    least ``base``), else the next one, recorded. Concurrent processes agree: the row of
    a version is written once (a lost insert re-reads the winner)."""
    for _ in range(3):
        latest = current(session, action)
        if (
            latest is not None
            and latest.contract_sha256 == contract_sha256
            and latest.contract_version >= base
        ):
            return latest.contract_version
        version = base if latest is None else max(latest.contract_version + 1, base)
        row = {
            "action": action,
            "contract_version": version,
            "contract_sha256": contract_sha256,
            "recorded_at": utcnow(),
        }
        if insert_or_ignore(session, GatewayContract.__table__, row):  # type: ignore[attr-defined]
            return version
    raise RuntimeError(f"could not settle the contract_version of {action}")


def record_versions(engine: Engine, digests: dict[str, tuple[str, int]]) -> dict[str, int]:
    """``{action: (contract_sha256, base)}`` → ``{action: contract_version}``, in one
    transaction of its own (start-up and ``draftgate gateway reload`` own it)."""
    try:
        with session_scope(engine) as session:
            return {
                action: version_for(session, action=action, contract_sha256=digest, base=base)
                for action, (digest, base) in sorted(digests.items())
            }
    except IntegrityError:  # a racing process won every retry: its rows are the answer
        with session_scope(engine) as session:
            return {
                action: version_for(session, action=action, contract_sha256=digest, base=base)
                for action, (digest, base) in sorted(digests.items())
            }
