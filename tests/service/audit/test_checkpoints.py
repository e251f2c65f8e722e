"""Verification and signed checkpoints against the attacks docs/audit.md names.

Every attack is made directly in the database, behind the service's back, and must be
detected twice: by the server (``GET /v1/audit/verify``) and by the offline verifier
(``service.audit.offline.verify_export``) over an export downloaded from the API, with the
checkpoints JSON from ``GET /v1/audit/checkpoints`` and the pinned public key.

The API runs in-process (``httpx.ASGITransport``, tests/support/api_client.py). The attacks
run on SQLite: how a changed row is judged is decided in Python over the rows read back
(tests/service/audit/test_chain.py keeps the database-specific tampering on both backends).
What depends on how the database stores and returns the log (a clean log verifying, the
signed checkpoint document, truncation and a full rewrite caught by checkpoints) runs on
SQLite and on PostgreSQL.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import delete, insert, update
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.audit import actions as audit
from service.audit import checkpoints
from service.audit import repository as audit_repository
from service.audit.chain import event_hash
from service.audit.models import AuditCheckpoint, AuditEvent, AuditHead
from service.audit.offline import Verdict, read_checkpoints, verdict, verify_export
from service.audit.verification import Verification, verify_chain
from service.canonical import canonical_json
from service.config import Settings
from service.db import session_scope
from service.runtime import build_runtime
from service.signing import generate_private_key, key_id_for, public_key_b64, sign
from service.sql import utcnow
from service.tracing import new_trace_id
from tests.support.api_client import bearer, in_process
from tests.support.backends import both_backends

TENANT = "demo"
EVENTS = AuditEvent.__table__  # type: ignore[attr-defined]
HEADS = AuditHead.__table__  # type: ignore[attr-defined]
CHECKPOINTS = AuditCheckpoint.__table__  # type: ignore[attr-defined]
REPORT_KEYS = {
    "ok",
    "events_checked",
    "head",
    "first_bad_seq",
    "problem",
    "checkpoints_checked",
    "anchored",
    "anchored_seq",
    "checkpoint_problem",
}


def chain_alone(log: Any) -> Verification:
    """What the hash chain and the head row prove by themselves, checkpoints set aside."""
    with session_scope(log.runtime.engine) as session:
        head = session.get(AuditHead, TENANT)
        events = [e.model_dump() for e in audit_repository.iter_chain(session, TENANT)]
    assert head is not None
    return verify_chain(events, recorded_head=(head.seq, head.hash))


@pytest.fixture
def settings_overrides(tmp_path: Path) -> dict[str, Any]:
    # The checkpoint key lives outside the state dir and outside the database.
    return {"checkpoint_key_file": tmp_path / "secrets" / "checkpoint-key.pem"}


@dataclass
class Log:
    """A demo log with three checkpoints, and what an auditor saved before any attack."""

    runtime: Any
    demo: dict[str, Any]
    api: httpx.Client
    public_key: str  # pinned by the auditor, from `draftgate audit checkpoint-key`
    checkpointed: list[int]  # the seqs of the checkpoints, oldest first
    saved_checkpoints: str  # GET /v1/audit/checkpoints, downloaded before tampering

    def head(self) -> int:
        return events_of(self.runtime)[-1].seq


def events_of(runtime, tenant: str = TENANT) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent).where(col(AuditEvent.tenant) == tenant).order_by(col(AuditEvent.seq))
        )
        return list(session.exec(statement).all())


def some_activity(runtime, door: ToolDoor, demo: dict[str, Any], rounds: int) -> None:
    for index in range(rounds):
        door.call("get_order", {"order_id": demo["orders"]["paid"]}, new_trace_id(), None)
        with session_scope(runtime.engine) as session:
            audit.record(
                session, tenant=TENANT, actor="test:cp", type="test.note", data={"i": index}
            )


def checkpoint_now(runtime) -> list[AuditCheckpoint]:
    key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    with session_scope(runtime.engine) as session:
        return checkpoints.create(session, key, now=utcnow())


def auditor(demo) -> dict[str, str]:
    return bearer(demo["tokens"]["auditor"])


def server_verify(log: Log) -> dict[str, Any]:
    response = log.api.get("/v1/audit/verify", headers=auditor(log.demo))
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    assert set(report) == REPORT_KEYS
    return report


def download_checkpoints(log: Log) -> str:
    response = log.api.get("/v1/audit/checkpoints", headers=auditor(log.demo))
    assert response.status_code == 200, response.text
    return response.text


def download_export(log: Log) -> list[str]:
    response = log.api.get("/v1/audit/export", headers=auditor(log.demo))
    assert response.status_code == 200, response.text
    return response.text.splitlines(keepends=True)


def offline_verify(log: Log, checkpoints_json: str | None = None, public_key: str | None = None):
    stored, _claimed = read_checkpoints(checkpoints_json or log.saved_checkpoints)
    return verify_export(
        download_export(log),
        checkpoints=stored,
        checkpoint_public_key=public_key or log.public_key,
    )


def tamper(runtime, *statements: Any) -> None:
    """Change the stored log behind the application's back, in one committed transaction."""
    with runtime.engine.begin() as connection:
        for statement in statements:
            # rowcount is -1 for an INSERT on some drivers; 0 means an UPDATE/DELETE missed
            assert connection.execute(statement).rowcount != 0, "the tampering touched nothing"


def at_seq(seq: int) -> Any:
    return (EVENTS.c.tenant == TENANT) & (EVENTS.c.seq == seq)


def move_head(runtime, seq: int, hash_: str) -> Any:
    return update(HEADS).where(HEADS.c.tenant == TENANT).values(seq=seq, hash=hash_)


@pytest.fixture
def log(runtime, demo) -> Iterator[Log]:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    checkpointed = []
    for _ in range(3):
        some_activity(runtime, door, demo, rounds=4)
        [made] = checkpoint_now(runtime)
        checkpointed.append(made.seq)
    some_activity(runtime, door, demo, rounds=2)  # events after the last checkpoint
    public_key = public_key_b64(
        checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    )
    with in_process(create_app(runtime)) as api:
        log = Log(runtime, demo, api, public_key, checkpointed, "")
        log.saved_checkpoints = download_checkpoints(log)
        yield log


def assert_detected(report: Any, first_bad_seq: int, *words: str) -> None:
    """Both verifiers' answers look alike: not ok, naming the first bad seq and the problem."""
    values = report if isinstance(report, dict) else report.report()
    assert values["ok"] is False, values
    assert values["first_bad_seq"] == first_bad_seq, values
    for word in words:
        assert word in values["problem"], values


# --- a clean log ----------------------------------------------------------------------------


@both_backends
def test_a_clean_log_verifies_on_the_server_and_offline_with_every_checkpoint(log):
    events = events_of(log.runtime)

    report = server_verify(log)
    offline = offline_verify(log, download_checkpoints(log))

    assert report["ok"] is True, report
    assert report["first_bad_seq"] is None
    assert report["problem"] is None
    assert report["events_checked"] == len(events)
    assert report["head"] == {"seq": events[-1].seq, "hash": events[-1].hash}
    assert report["checkpoints_checked"] == 3
    assert offline.ok is True, offline.problem
    assert offline.checkpoints_checked == 3
    assert offline.events_checked == len(events)  # the export stops before its own event
    # The log went on after the third checkpoint: both say so, under the same names.
    assert (report["anchored"], report["anchored_seq"]) == (False, log.checkpointed[-1])
    assert (offline.anchored, offline.anchored_seq) == (False, log.checkpointed[-1])
    assert verdict(offline) is Verdict.UNANCHORED


@both_backends
def test_an_export_taken_right_after_a_checkpoint_is_anchored_offline(log):
    """Before: the export's own ``audit.exported`` event followed the checkpoint, so no
    export could ever be fully covered by a checkpoint taken before it."""
    [made] = checkpoint_now(log.runtime)

    offline = offline_verify(log, download_checkpoints(log))

    assert offline.ok is True, offline.problem
    assert (offline.head_seq, offline.anchored_seq, offline.anchored) == (made.seq, made.seq, True)
    assert verdict(offline) is Verdict.OK
    assert events_of(log.runtime)[-1].type == "audit.exported"
    assert events_of(log.runtime)[-1].seq == made.seq + 1


@both_backends
def test_the_checkpoints_document_is_signed_as_documented(log):
    document = json.loads(log.saved_checkpoints)
    events = {e.seq: e for e in events_of(log.runtime)}

    assert set(document) == {"tenant", "public_key", "key_id", "checkpoints"}
    assert document["tenant"] == TENANT
    assert document["public_key"] == log.public_key
    assert document["key_id"] == key_id_for(log.public_key)
    assert [c["seq"] for c in document["checkpoints"]] == log.checkpointed
    raw_key = base64.urlsafe_b64decode(log.public_key + "=" * (-len(log.public_key) % 4))
    public = Ed25519PublicKey.from_public_bytes(raw_key)
    for checkpoint in document["checkpoints"]:
        assert checkpoint["hash"] == events[checkpoint["seq"]].hash
        assert checkpoint["key_id"] == document["key_id"]
        assert checkpoint["at"].endswith("Z")
        statement = {
            "type": "draftgate.checkpoint.v1",
            "tenant": checkpoint["tenant"],
            "seq": checkpoint["seq"],
            "hash": checkpoint["hash"],
            "at": checkpoint["at"],
        }
        signature = checkpoint["signature"]
        assert "=" not in signature
        # Raises InvalidSignature unless it is Ed25519 over JCS(statement), base64url-nopad.
        public.verify(
            base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
            rfc8785.dumps(statement),
        )


def test_a_checkpoint_is_only_made_when_the_head_moved(log):
    assert checkpoint_now(log.runtime) != []  # events were added after the third one
    assert checkpoint_now(log.runtime) == []

    assert server_verify(log)["checkpoints_checked"] == 4


# --- the attacks ----------------------------------------------------------------------------


def test_editing_one_events_data_is_detected_at_that_seq(log):
    seq = log.checkpointed[0] + 2
    tamper(log.runtime, update(EVENTS).where(at_seq(seq)).values(data={"edited": True}))

    assert_detected(server_verify(log), seq, "hash")
    assert_detected(offline_verify(log), seq, "hash")


def test_deleting_one_event_is_detected_at_the_missing_seq(log):
    seq = log.checkpointed[1] - 1
    tamper(log.runtime, delete(EVENTS).where(at_seq(seq)))

    assert_detected(server_verify(log), seq, "missing")
    assert_detected(offline_verify(log), seq, "missing")


def test_swapping_two_events_is_detected_at_the_first_of_them(log):
    first, second = log.checkpointed[0] + 1, log.checkpointed[1] + 1
    ids = {e.seq: e.id for e in events_of(log.runtime)}
    tamper(  # (tenant, seq) is unique: swap through a free seq
        log.runtime,
        update(EVENTS).where(EVENTS.c.id == ids[first]).values(seq=-1),
        update(EVENTS).where(EVENTS.c.id == ids[second]).values(seq=first),
        update(EVENTS).where(EVENTS.c.id == ids[first]).values(seq=second),
    )

    assert_detected(server_verify(log), first)
    assert_detected(offline_verify(log), first)


@both_backends
def test_a_truncated_tail_with_the_head_moved_back_is_caught_only_by_a_checkpoint(log):
    last_checkpoint = log.checkpointed[-1]
    keep = last_checkpoint - 3
    kept = {e.seq: e for e in events_of(log.runtime)}[keep]
    tamper(
        log.runtime,
        delete(EVENTS).where((EVENTS.c.tenant == TENANT) & (EVENTS.c.seq > keep)),
        move_head(log.runtime, keep, kept.hash),
    )
    # The chain alone is consistent now: it links, recomputes and reaches the head row.
    alone = chain_alone(log)
    assert alone.ok, alone.problem

    report = server_verify(log)
    offline = offline_verify(log)

    assert_detected(report, keep + 1, "truncated")
    assert report["events_checked"] == keep
    # Offline too: the export stops at the moved head, before its own event.
    assert_detected(offline, keep + 1, "truncated")
    assert offline.events_checked == keep


def test_a_truncation_is_caught_offline_with_saved_checkpoints_even_if_they_are_deleted(log):
    last_checkpoint = log.checkpointed[-1]
    keep = log.checkpointed[0] + 1
    kept = {e.seq: e for e in events_of(log.runtime)}[keep]
    tamper(
        log.runtime,
        delete(EVENTS).where((EVENTS.c.tenant == TENANT) & (EVENTS.c.seq > keep)),
        move_head(log.runtime, keep, kept.hash),
        delete(CHECKPOINTS).where(CHECKPOINTS.c.seq > keep),  # the evidence, too
    )

    offline = offline_verify(log)  # with the checkpoints the auditor saved earlier

    assert offline.ok is False
    assert keep < offline.first_bad_seq <= log.checkpointed[1] <= last_checkpoint


@both_backends
def test_rewriting_the_whole_chain_with_recomputed_hashes_is_caught_by_the_checkpoint(log):
    edited = log.checkpointed[0] + 2  # between the first and the second checkpoint
    events = events_of(log.runtime)
    statements = []
    previous = None
    for event in events:
        if event.seq < edited:
            previous = event.hash
            continue
        row = event.model_dump()
        if event.seq == edited:
            row["data"] = {**row["data"], "rewritten": True}
        row["prev_hash"] = previous
        row["hash"] = event_hash(row)
        previous = row["hash"]
        statements.append(
            update(EVENTS)
            .where(EVENTS.c.id == event.id)
            .values(data=row["data"], prev_hash=row["prev_hash"], hash=row["hash"])
        )
    statements.append(move_head(log.runtime, events[-1].seq, previous))
    tamper(log.runtime, *statements)
    alone = chain_alone(log)
    assert alone.ok, "the chain alone verifies after a full rewrite"

    report = server_verify(log)
    offline = offline_verify(log)

    # The first checkpoint still agrees; the second one, after the edit, does not.
    assert_detected(report, log.checkpointed[1], "rewritten")
    assert_detected(offline, log.checkpointed[1], "rewritten")
    assert report["events_checked"] == len(events)


def test_a_checkpoint_signed_by_another_key_is_reported_not_trusted(log):
    forger = generate_private_key()
    head = events_of(log.runtime)[-1]
    now = utcnow()
    statement = checkpoints.statement(TENANT, head.seq, head.hash, now)
    tamper(
        log.runtime,
        insert(CHECKPOINTS).values(
            tenant=TENANT,
            seq=head.seq,
            hash=head.hash,
            at=now,
            key_id=key_id_for(public_key_b64(forger)),
            signature=sign(forger, canonical_json(statement)),
        ),
    )

    assert_detected(server_verify(log), head.seq, "not signed")
    assert_detected(offline_verify(log, download_checkpoints(log)), head.seq, "not signed")


def test_a_checkpoint_claiming_the_trusted_key_id_with_a_foreign_signature_is_reported(log):
    forger = generate_private_key()
    head = events_of(log.runtime)[-1]
    now = utcnow()
    statement = checkpoints.statement(TENANT, head.seq, head.hash, now)
    tamper(
        log.runtime,
        insert(CHECKPOINTS).values(
            tenant=TENANT,
            seq=head.seq,
            hash=head.hash,
            at=now,
            key_id=key_id_for(log.public_key),
            signature=sign(forger, canonical_json(statement)),
        ),
    )

    assert_detected(server_verify(log), head.seq, "not signed")
    assert_detected(offline_verify(log, download_checkpoints(log)), head.seq, "not signed")


def test_a_checkpoint_whose_hash_was_edited_in_the_database_is_reported(log):
    target = log.checkpointed[1]
    other = {e.seq: e for e in events_of(log.runtime)}[target - 1].hash
    tamper(
        log.runtime,
        update(CHECKPOINTS)
        .where((CHECKPOINTS.c.tenant == TENANT) & (CHECKPOINTS.c.seq == target))
        .values(hash=other),
    )

    assert_detected(server_verify(log), target, "not signed")
    assert_detected(offline_verify(log, download_checkpoints(log)), target, "not signed")


def test_offline_verification_with_a_wrong_public_key_refuses(log):
    wrong = public_key_b64(generate_private_key())

    result = offline_verify(log, public_key=wrong)

    assert_detected(result, log.checkpointed[0], "not signed")


def test_a_server_configured_with_only_the_public_key_verifies_checkpoints(log, tmp_path):
    settings = Settings(
        state_dir=tmp_path / "other-state",
        database_url=log.runtime.settings.database_url,
        checkpoint_public_key=log.public_key,  # no private key file for this process
    )
    assert not settings.resolved_checkpoint_key_file().exists()
    runtime = build_runtime(settings)
    try:
        with in_process(create_app(runtime)) as api:
            report = server_verify(Log(runtime, log.demo, api, log.public_key, [], ""))
    finally:
        runtime.engine.dispose()

    assert report["ok"] is True, report
    assert report["checkpoints_checked"] == 3


def test_a_server_pinned_to_another_public_key_reports_the_checkpoints(log, tmp_path):
    settings = Settings(
        state_dir=tmp_path / "other-state",
        database_url=log.runtime.settings.database_url,
        checkpoint_public_key=public_key_b64(generate_private_key()),
    )
    runtime = build_runtime(settings)
    try:
        with in_process(create_app(runtime)) as api:
            report = server_verify(Log(runtime, log.demo, api, log.public_key, [], ""))
    finally:
        runtime.engine.dispose()

    assert_detected(report, log.checkpointed[0], "not signed")


def test_a_server_without_the_checkpoint_key_does_not_call_a_truncated_log_ok(log, tmp_path):
    """DOUBTFUL (fail-open): with neither DRAFTGATE_CHECKPOINT_PUBLIC_KEY nor the key file, the
    API silently skips the signed checkpoints it holds and answers ok for a log truncated
    behind a moved head. compose.yaml defaults DRAFTGATE_CHECKPOINT_PUBLIC_KEY to empty for
    the api service, so this is the production shape unless the operator remembers it."""
    keep = log.checkpointed[-1] - 3
    kept = {e.seq: e for e in events_of(log.runtime)}[keep]
    tamper(
        log.runtime,
        delete(EVENTS).where((EVENTS.c.tenant == TENANT) & (EVENTS.c.seq > keep)),
        move_head(log.runtime, keep, kept.hash),
    )
    settings = Settings(
        state_dir=tmp_path / "keyless-state", database_url=log.runtime.settings.database_url
    )
    assert not settings.resolved_checkpoint_key_file().exists()
    runtime = build_runtime(settings)
    try:
        with in_process(create_app(runtime)) as api:
            report = server_verify(Log(runtime, log.demo, api, log.public_key, [], ""))
    finally:
        runtime.engine.dispose()

    assert report["ok"] is False, report
