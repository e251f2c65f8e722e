"""Security issue 8 §6: checkpointing fails loudly. ``draftgate doctor`` (and readiness, and the
checkpoint task) say what is wrong with the database, the schema, the checkpoint key and the
audit checkpoints, instead of a warning in a log nobody reads.

The command runs in-process on a real migrated SQLite database; the broker is the embedded
one (kombu's SQLAlchemy transport in the state dir)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import Result

from service import health
from service.audit import actions as audit
from service.audit import checkpoints
from service.db import make_engine, session_scope
from service.errors import DomainError
from service.health import readiness
from service.keys import actions as keys
from service.keys.models import ApproverKey
from service.migrate import upgrade
from service.signing import generate_private_key, key_id_for, public_key_b64
from service.sql import utcnow
from tests.support import cli

EVERY_CHECK = [
    "database",
    "schema",
    "broker",
    "checkpoint_key",
    "audit_checkpoints",
    "approver_keys",
]


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture(autouse=True)
def state_dir(runtime) -> Path:
    """The state dir, as `draftgate dev` leaves it (the embedded broker's database lives there)."""
    runtime.settings.state_dir.mkdir(parents=True, exist_ok=True)
    return runtime.settings.state_dir


def doctor(runtime, *args: str, **extra_env: str) -> Result:
    return cli.run("doctor", *args, env=cli.operator_env(runtime, **extra_env))


def doctor_json(runtime, *args: str, **extra_env: str) -> tuple[int, dict[str, Any]]:
    result = doctor(runtime, *args, "--json", **extra_env)
    return result.exit_code, json.loads(result.stdout)


def key_file(runtime) -> Path:
    return runtime.settings.resolved_checkpoint_key_file()


def with_key(runtime) -> str:
    """The checkpoint key generated in the state dir; returns its public key."""
    return public_key_b64(checkpoints.ensure_key(key_file(runtime)))


def note(runtime, count: int = 2) -> None:
    for index in range(count):
        with session_scope(runtime.engine) as session:
            audit.record(
                session, tenant="demo", actor="test:a", type="test.note", data={"i": index}
            )


# --- all well ------------------------------------------------------------------------------------


def test_a_healthy_stack_passes_every_check_with_exit_0(runtime):
    with_key(runtime)
    note(runtime)

    result = doctor(runtime)

    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS"]
    assert [line.split() for line in lines[1:-1]] == [[name, "ok"] for name in EVERY_CHECK]
    assert lines[-1] == "all ok"


def test_json_names_the_component_and_every_check(runtime):
    with_key(runtime)

    code, report = doctor_json(runtime, "--component", "worker")

    assert code == 0
    assert report == {
        "ok": True,
        "component": "worker",
        "checks": dict.fromkeys(EVERY_CHECK, "ok"),
    }


def test_each_component_is_checked_for_what_it_needs(runtime):
    # No checkpoint key here: only the component that signs (the worker) needs one.
    pinned = public_key_b64(generate_private_key())
    needs = {
        "api": ["database", "schema", "broker", "audit_checkpoints", "approver_keys"],
        "mcp": ["database", "schema", "audit_checkpoints"],
        "beat": ["database", "schema", "broker", "audit_checkpoints"],
    }
    for component, checks in needs.items():
        code, report = doctor_json(
            runtime, "--component", component, DRAFTGATE_CHECKPOINT_PUBLIC_KEY=pinned
        )
        assert (code, list(report["checks"])) == (0, checks), component

    code, report = doctor_json(
        runtime, "--component", "worker", DRAFTGATE_CHECKPOINT_PUBLIC_KEY=pinned
    )
    assert code == 1
    assert report["checks"]["checkpoint_key"].startswith("missing")


def test_an_unknown_component_is_a_usage_error(runtime):
    assert doctor(runtime, "--component", "scheduler").exit_code == 2


# --- the checkpoint key --------------------------------------------------------------------------


def test_a_missing_checkpoint_key_is_reported_and_fails(runtime):
    code, report = doctor_json(runtime)

    assert code == 1
    assert report["ok"] is False
    checks = report["checks"]
    assert checks["checkpoint_key"].startswith(f"missing: no checkpoint key at {key_file(runtime)}")
    assert "draftgate audit checkpoint-key --generate" in checks["checkpoint_key"]
    assert checks["audit_checkpoints"].startswith("not anchored: no checkpoint key")
    assert [name for name, status in checks.items() if status == "ok"] == [
        "database",
        "schema",
        "broker",
        "approver_keys",
    ]


def test_the_table_says_how_many_checks_failed(runtime):
    result = doctor(runtime)

    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "2 of 6 checks failed"


@pytest.mark.parametrize("damage", ["garbage", "public-key-only", "encrypted"])
def test_a_key_file_that_holds_no_usable_key_is_invalid(runtime, damage):
    path = key_file(runtime)
    if damage == "garbage":
        path.write_text("not a key\n")
    elif damage == "public-key-only":  # what an operator pastes by mistake
        path.write_text(public_key_b64(generate_private_key()) + "\n")
    else:  # the signer runs unattended: nobody is there to type a passphrase
        from cryptography.hazmat.primitives import serialization

        pem = generate_private_key().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
        path.write_bytes(pem)

    code, report = doctor_json(runtime, "--component", "worker")

    assert code == 1
    assert report["checks"]["checkpoint_key"].startswith(f"invalid: {path} is not an unencrypted")


def test_a_key_path_that_cannot_be_read_is_unreadable(runtime):
    # A directory where the file should be: unreadable as a file for every user, root too
    # (a mis-mounted secret looks like this).
    key_file(runtime).mkdir()

    code, report = doctor_json(runtime, "--component", "worker")

    assert code == 1
    status = report["checks"]["checkpoint_key"]
    assert status.startswith(f"unreadable: {key_file(runtime)}: Is a directory")
    assert f"readable by uid {os.getuid()}" in status


def test_a_key_file_the_user_may_not_read_is_unreadable(runtime, monkeypatch):
    # CI runs as root, which reads a file whatever its mode: the refusal the kernel would
    # give another user is raised where the key is read.
    with_key(runtime)
    path = key_file(runtime)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(health, "load_private_key", denied)
    code, report = doctor_json(runtime, "--component", "worker")

    assert code == 1
    assert report["checks"]["checkpoint_key"].startswith(f"unreadable: {path}: Permission denied")


def test_a_key_other_than_the_trusted_one_is_a_mismatch(runtime):
    with_key(runtime)
    trusted = public_key_b64(generate_private_key())

    code, report = doctor_json(
        runtime, "--component", "worker", DRAFTGATE_CHECKPOINT_PUBLIC_KEY=trusted
    )

    assert code == 1
    status = report["checks"]["checkpoint_key"]
    assert status.startswith("mismatch:")
    assert trusted in status


def test_the_key_matching_the_trusted_one_is_ok(runtime):
    code, report = doctor_json(
        runtime, "--component", "worker", DRAFTGATE_CHECKPOINT_PUBLIC_KEY=with_key(runtime)
    )

    assert (code, report["checks"]["checkpoint_key"]) == (0, "ok")


def test_readiness_reports_an_invalid_key_file_instead_of_failing(runtime):
    # Without a pinned public key the key file is the trust root; one that cannot be read
    # used to make the probe itself raise (a 500 from /readyz, not a report).
    key_file(runtime).write_text("not a key\n")

    checks = readiness(runtime.engine, runtime.settings)

    assert checks["audit_checkpoints"].startswith("not anchored: invalid:")


def test_the_checkpoint_task_fails_loudly_on_an_invalid_key(runtime, monkeypatch, caplog):
    from workers import tasks

    key_file(runtime).write_text("not a key\n")
    monkeypatch.setattr(tasks, "runtime", lambda: runtime)

    with (
        caplog.at_level(logging.ERROR, logger="workers.tasks"),
        pytest.raises(ValueError, match="PEM"),
    ):
        tasks.checkpoint.run()

    [logged] = [r for r in caplog.records if r.name == "workers.tasks"]
    assert logged.levelno == logging.ERROR
    assert "audit checkpoints are NOT being made: invalid:" in logged.getMessage()


def test_the_checkpoint_task_names_the_missing_key(runtime, monkeypatch, caplog):
    from workers import tasks

    monkeypatch.setattr(tasks, "runtime", lambda: runtime)

    with caplog.at_level(logging.ERROR, logger="workers.tasks"), pytest.raises(DomainError):
        tasks.checkpoint.run()

    assert f"NOT being made: missing: no checkpoint key at {key_file(runtime)}" in caplog.text


# --- the database and its schema ----------------------------------------------------------------


def test_a_database_that_was_never_migrated_fails_the_schema_check(runtime, tmp_path):
    with_key(runtime)
    empty = tmp_path / "empty.db"
    engine = make_engine(f"sqlite:///{empty}")
    with engine.begin() as connection:  # a database, but not draftgate's
        connection.execute(text("CREATE TABLE unrelated (id INTEGER)"))
    engine.dispose()

    code, report = doctor_json(runtime, DRAFTGATE_DATABASE_URL=f"sqlite:///{empty}")

    assert code == 1
    checks = report["checks"]
    assert checks["database"] == "ok"
    assert checks["schema"].startswith("not migrated:")
    assert "draftgate migrate" in checks["schema"]
    assert checks["audit_checkpoints"] == "not checked: the schema check failed"


def test_a_database_behind_the_code_fails_the_schema_check(runtime, tmp_path):
    with_key(runtime)
    old = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(old, "0001")

    code, report = doctor_json(runtime, DRAFTGATE_DATABASE_URL=old)

    assert code == 1
    assert report["checks"]["schema"].startswith("behind: the database is at revision 0001")


def test_a_database_ahead_of_the_code_fails_the_schema_check(runtime):
    with_key(runtime)
    with runtime.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))

    code, report = doctor_json(runtime)

    assert code == 1
    assert report["checks"]["schema"].startswith("ahead: the database is at revision 9999")


def test_a_missing_database_file_is_reported_not_created(runtime, tmp_path):
    with_key(runtime)
    missing = tmp_path / "nowhere.db"

    code, report = doctor_json(runtime, DRAFTGATE_DATABASE_URL=f"sqlite:///{missing}")

    assert code == 1
    assert report["checks"]["database"].startswith(f"unavailable: no database at {missing}")
    assert report["checks"]["schema"] == "not checked: the database check failed"
    assert not missing.exists()


def test_an_unreachable_broker_is_reported(runtime):
    with_key(runtime)

    # Port 9 (discard) on the loopback: nothing listens there.
    code, report = doctor_json(
        runtime, "--component", "beat", DRAFTGATE_BROKER_URL="redis://127.0.0.1:9/0"
    )

    assert code == 1
    assert report["checks"]["broker"].startswith("unavailable:")


# --- audit checkpoints ----------------------------------------------------------------------------


def test_stale_checkpoints_are_reported_until_the_log_is_checkpointed(runtime):
    key = checkpoints.ensure_key(key_file(runtime))
    note(runtime)
    # Judged by a deployment that checkpoints every microsecond, the events are long overdue.
    impatient = {"DRAFTGATE_CHECKPOINT_INTERVAL_SECONDS": "0.000001"}

    code, report = doctor_json(runtime, "--component", "beat", **impatient)

    assert code == 1
    status = report["checks"]["audit_checkpoints"]
    assert status.startswith("not anchored: demo: events since seq 1")
    assert "older than twice the checkpoint interval" in status

    with session_scope(runtime.engine) as session:
        checkpoints.create(session, key, now=utcnow())
    assert doctor_json(runtime, "--component", "beat", **impatient) == (
        0,
        {
            "ok": True,
            "component": "beat",
            "checks": dict.fromkeys(["database", "schema", "broker", "audit_checkpoints"], "ok"),
        },
    )


# --- approver keys -------------------------------------------------------------------------------


def test_a_weak_approver_key_in_the_database_is_named_as_a_failed_check(runtime):
    """Issue 17: a small-order key written straight into the database never counts, and the
    operator is told which one it is (regression: there was no such check)."""
    with_key(runtime)
    identity = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
    with session_scope(runtime.engine) as session:
        session.add(
            ApproverKey(
                key_id=key_id_for(identity),
                tenant="demo",
                approver="alice",
                public_key=identity,
                created_at=utcnow(),
            )
        )

    code, report = doctor_json(runtime, "--component", "api")

    assert code == 1
    status = report["checks"]["approver_keys"]
    assert status.startswith("weak: 1 active credential(s) hold a weak public key")
    assert f"demo/{key_id_for(identity)} of alice" in status
    assert "draftgate keys revoke" in status
    assert [name for name, check in report["checks"].items() if check != "ok"] == ["approver_keys"]

    with session_scope(runtime.engine) as session:
        keys.revoke(session, tenant="demo", key_id=key_id_for(identity), actor="operator:test")
    assert doctor_json(runtime, "--component", "api")[1]["checks"]["approver_keys"] == "ok"


def test_a_weak_pinned_checkpoint_public_key_is_named(runtime):
    with_key(runtime)
    weak = {"DRAFTGATE_CHECKPOINT_PUBLIC_KEY": "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}

    code, report = doctor_json(runtime, "--component", "worker", **weak)

    assert code == 1
    assert report["checks"]["checkpoint_key"].startswith(
        "invalid: DRAFTGATE_CHECKPOINT_PUBLIC_KEY is not a usable Ed25519 key: it is not the "
        "canonical encoding of a point of Ed25519's prime-order subgroup"
    )


# --- the server secret ----------------------------------------------------------------------------


def test_a_configured_secret_key_file_is_checked(runtime, tmp_path):
    with_key(runtime)
    secret = tmp_path / "server-secret"

    code, report = doctor_json(runtime, "--component", "api", DRAFTGATE_SECRET_KEY_FILE=str(secret))
    assert code == 1
    assert report["checks"]["secret_key"].startswith(f"missing: no secret key at {secret}")
    assert not secret.exists()  # doctor reads; it never creates the secret

    secret.write_text("too short\n")
    code, report = doctor_json(runtime, "--component", "api", DRAFTGATE_SECRET_KEY_FILE=str(secret))
    assert code == 1
    assert report["checks"]["secret_key"].startswith("invalid:")

    secret.write_text("a" * 64 + "\n")
    code, report = doctor_json(runtime, "--component", "api", DRAFTGATE_SECRET_KEY_FILE=str(secret))
    assert (code, report["checks"]["secret_key"]) == (0, "ok")


def test_no_secret_key_check_unless_one_is_configured(runtime):
    with_key(runtime)

    code, report = doctor_json(runtime, "--component", "api")

    assert code == 0
    assert "secret_key" not in report["checks"]


def test_a_migrated_postgresql_database_passes(runtime, postgres_url):
    with_key(runtime)

    code, report = doctor_json(
        runtime, "--component", "worker", DRAFTGATE_DATABASE_URL=postgres_url
    )

    assert (code, report["checks"]) == (0, dict.fromkeys(EVERY_CHECK, "ok"))
