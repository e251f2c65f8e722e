"""Security issue §4-§6: checkpoints anchor the log, and they fail loudly.

§4 the signer re-verifies the segment since the last checkpoint and signs nothing that does
not link; §5 verification says whether the tail is anchored at all; §6 a missing key or
overdue checkpoints are reported by readiness (and the checkpoint task fails)."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select

from service.audit import actions as audit
from service.audit import checkpoints
from service.audit.models import AuditCheckpoint, AuditEvent, AuditHead
from service.audit.verification import verify_chain
from service.db import read_scope, session_scope
from service.errors import DomainError
from service.health import readiness
from service.signing import public_key_b64
from service.sql import utcnow

TENANT = "demo"


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def note(runtime, count: int = 3) -> None:
    for index in range(count):
        with session_scope(runtime.engine) as session:
            audit.record(
                session, tenant=TENANT, actor="test:a", type="test.note", data={"i": index}
            )


def sign_now(runtime) -> list[AuditCheckpoint]:
    key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    with session_scope(runtime.engine) as session:
        return checkpoints.create(session, key, now=utcnow())


def refused_events(runtime) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        return list(
            session.exec(
                select(AuditEvent).where(col(AuditEvent.type) == checkpoints.REFUSED_EVENT)
            ).all()
        )


def test_a_clean_segment_is_signed(runtime):
    note(runtime)
    (made,) = sign_now(runtime)
    assert made.seq == 3
    assert refused_events(runtime) == []


@pytest.mark.parametrize("attack", ["edit-data", "move-head"])
def test_the_signer_refuses_a_segment_that_does_not_link(runtime, attack):
    note(runtime, 2)
    sign_now(runtime)
    note(runtime, 3)  # seqs 3..5 after the checkpoint at 2
    with session_scope(runtime.engine) as session:
        if attack == "edit-data":
            session.execute(
                update(AuditEvent).where(col(AuditEvent.seq) == 4).values(data={"i": "rewritten"})
            )
        else:  # the head row moved on without the events that would justify it
            session.execute(update(AuditHead).values(seq=AuditHead.seq + 10))

    assert sign_now(runtime) == []

    [refused] = refused_events(runtime)
    assert refused.actor == "system:checkpoint"
    assert refused.data["last_checkpoint_seq"] == 2
    health = readiness(runtime.engine, runtime.settings)["audit_checkpoints"]
    assert health.startswith("not anchored")
    assert "refused" in health


def test_readiness_reports_a_missing_checkpoint_key(runtime):
    assert not runtime.settings.resolved_checkpoint_key_file().exists()
    checks = readiness(runtime.engine, runtime.settings)
    assert checks["audit_checkpoints"].startswith("not anchored: no checkpoint key")


def test_readiness_reports_overdue_checkpoints(runtime):
    checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    note(runtime)
    assert readiness(runtime.engine, runtime.settings)["audit_checkpoints"] == "ok"
    # The same log judged by a deployment checkpointing every microsecond: long overdue.
    impatient = runtime.settings.model_copy(update={"checkpoint_interval_seconds": 1e-6})
    assert (
        "older than twice the checkpoint interval"
        in (readiness(runtime.engine, impatient)["audit_checkpoints"])
    )
    sign_now(runtime)
    assert readiness(runtime.engine, impatient)["audit_checkpoints"] == "ok"


def test_verification_says_whether_the_tail_is_anchored(runtime):
    note(runtime, 2)
    sign_now(runtime)
    note(runtime, 2)
    key = checkpoints.trusted_public_key(runtime.settings)
    with read_scope(runtime.engine) as session:
        result = audit.verify(session, TENANT, checkpoint_public_key=key)
    assert result.ok
    assert (result.anchored, result.anchored_seq, result.head_seq) == (False, 2, 4)
    report = result.report()
    assert (report["anchored"], report["anchored_seq"]) == (False, 2)

    sign_now(runtime)
    with read_scope(runtime.engine) as session:
        assert audit.verify(session, TENANT, checkpoint_public_key=key).anchored


def test_a_log_with_no_checkpoint_is_not_anchored(runtime):
    note(runtime, 1)
    with Session(runtime.engine) as session:
        events = [e.model_dump() for e in session.exec(select(AuditEvent)).all()]
    result = verify_chain(events)
    assert result.ok
    assert (result.anchored, result.anchored_seq, result.head_seq) == (False, 0, 1)


def test_the_checkpoint_task_fails_loudly_without_its_key(runtime, monkeypatch):
    from workers import tasks

    monkeypatch.setattr(tasks, "runtime", lambda: runtime)
    with pytest.raises(DomainError) as failed:
        tasks.checkpoint.run()
    assert failed.value.code == "CHECKPOINT_KEY_MISSING"


def test_an_empty_chain_is_not_anchored(runtime):
    """No checkpoint says how long the log was, so a log cut to nothing looks just like it
    (before: seq 0 == anchored seq 0 counted as anchored)."""
    key = public_key_b64(checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file()))
    with read_scope(runtime.engine) as session:
        result = audit.verify(session, "nobody-yet", checkpoint_public_key=key)
    assert result.ok
    assert (result.anchored, result.anchored_seq, result.head_seq) == (False, 0, 0)
    assert verify_chain([]).anchored is False


def test_the_operators_verify_flags_overdue_checkpoints(runtime):
    from tests.support import cli

    checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    note(runtime)
    sign_now(runtime)
    note(runtime)  # events after the newest checkpoint...
    env = {
        "DRAFTGATE_DATABASE_URL": runtime.settings.database_url,
        "DRAFTGATE_STATE_DIR": str(runtime.settings.state_dir),
        "DRAFTGATE_DEFAULT_TENANT": TENANT,
    }

    on_time = cli.run("audit", "verify", env=env)
    # ...judged by a deployment checkpointing every microsecond: long overdue.
    overdue = cli.run(
        "audit", "verify", env={**env, "DRAFTGATE_CHECKPOINT_INTERVAL_SECONDS": "1e-6"}
    )

    assert on_time.exit_code == 0, on_time.stderr
    assert "checkpoints:" not in on_time.stderr
    assert overdue.exit_code == 0, overdue.stderr
    assert "warning: checkpoints:" in overdue.stderr
    assert "older than twice the checkpoint interval" in overdue.stderr
