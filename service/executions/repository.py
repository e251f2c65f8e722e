from __future__ import annotations

from datetime import datetime

from sqlalchemy import func
from sqlmodel import Session, col, select

from service.executions.models import Execution, ExecutionAttempt, ExecutionStatus, OutboxMessage
from service.sql import insert_or_ignore


def get(session: Session, execution_id: str, *, for_update: bool = False) -> Execution | None:
    statement = select(Execution).where(col(Execution.id) == execution_id)
    if for_update:
        statement = statement.with_for_update().execution_options(populate_existing=True)
    return session.exec(statement).one_or_none()


def for_tenant(session: Session, tenant: str, execution_id: str) -> Execution | None:
    execution = get(session, execution_id)
    return execution if execution is not None and execution.tenant == tenant else None


def for_draft(session: Session, draft_id: str) -> Execution | None:
    """The draft's latest execution (of its latest executed revision), if any."""
    statement = (
        select(Execution)
        .where(col(Execution.draft_id) == draft_id)
        .order_by(col(Execution.revision).desc())
        .limit(1)
    )
    return session.exec(statement).first()


def for_revision(session: Session, draft_id: str, revision: int) -> Execution | None:
    statement = select(Execution).where(
        col(Execution.draft_id) == draft_id, col(Execution.revision) == revision
    )
    return session.exec(statement).one_or_none()


def insert_unless_exists(session: Session, execution: Execution) -> bool:
    """Insert the revision's execution unless one exists (unique per draft revision); True if
    inserted."""
    return insert_or_ignore(session, Execution.__table__, execution.model_dump())  # type: ignore[attr-defined]


def attempts(session: Session, execution_id: str) -> list[ExecutionAttempt]:
    statement = (
        select(ExecutionAttempt)
        .where(col(ExecutionAttempt.execution_id) == execution_id)
        .order_by(col(ExecutionAttempt.number))
    )
    return list(session.exec(statement).all())


def attempt(session: Session, execution_id: str, number: int) -> ExecutionAttempt | None:
    statement = select(ExecutionAttempt).where(
        col(ExecutionAttempt.execution_id) == execution_id, col(ExecutionAttempt.number) == number
    )
    return session.exec(statement).one_or_none()


def unpublished(
    session: Session, *, created_before: datetime, execution_id: str | None = None, limit: int = 100
) -> list[OutboxMessage]:
    statement = select(OutboxMessage).where(
        col(OutboxMessage.published_at).is_(None), col(OutboxMessage.created_at) <= created_before
    )
    if execution_id is not None:
        statement = statement.where(col(OutboxMessage.execution_id) == execution_id)
    statement = statement.order_by(col(OutboxMessage.id)).limit(limit)
    return list(session.exec(statement).all())


def outbox_message(
    session: Session, message_id: int, *, for_update: bool = False
) -> OutboxMessage | None:
    statement = select(OutboxMessage).where(col(OutboxMessage.id) == message_id)
    if for_update:
        statement = statement.with_for_update(skip_locked=True)
    return session.exec(statement).one_or_none()


def stalled(session: Session, *, now: datetime, limit: int = 100) -> list[Execution]:
    """Executions whose message may be lost: due to be published again (their backoff since
    the last publish has passed), and either queued and due to run, or running with an
    expired lease (the worker died)."""
    due = func.coalesce(col(Execution.next_attempt_at), col(Execution.updated_at)) <= now
    republish = func.coalesce(col(Execution.republish_at), col(Execution.updated_at)) <= now
    statement = (
        select(Execution)
        .where(
            republish,
            ((col(Execution.status) == ExecutionStatus.QUEUED) & due)
            | (
                (col(Execution.status) == ExecutionStatus.RUNNING)
                & (col(Execution.lease_expires_at) <= now)
            ),
        )
        .order_by(col(Execution.updated_at))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def never_started(
    session: Session, *, requested_before: datetime, limit: int = 100
) -> list[Execution]:
    """Queued executions that never had an attempt and were requested before the moment."""
    statement = (
        select(Execution)
        .where(
            col(Execution.status) == ExecutionStatus.QUEUED,
            col(Execution.attempts) == 0,
            col(Execution.created_at) <= requested_before,
        )
        .order_by(col(Execution.created_at))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def owned_by(session: Session, execution_id: str, attempt: int) -> bool:
    """Under a row lock: is ``attempt`` still the running attempt (the fencing check)?"""
    execution = get(session, execution_id, for_update=True)
    return (
        execution is not None
        and execution.status is ExecutionStatus.RUNNING
        and execution.attempts == attempt
    )
