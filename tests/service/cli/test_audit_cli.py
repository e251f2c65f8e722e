"""``draftgate audit verify`` as an operator runs it, in-process, against the test database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, update
from sqlmodel import Session
from typer.testing import Result

from mcp_adapter.tools import ToolDoor
from service.audit import actions as audit
from service.audit import checkpoints, review
from service.audit.models import AuditEvent, AuditHead
from service.audit.schemas import EventFilter
from service.canonical import canonical_json
from service.db import session_scope
from service.signing import generate_private_key, key_id_for, public_key_b64, sign
from service.tracing import new_trace_id
from tests.support import cli
from tests.support.backends import both_backends

EVENTS = AuditEvent.__table__  # type: ignore[attr-defined]
HEX64 = set("0123456789abcdef")


def run_cli(runtime, *args: str, **extra_env: str) -> Result:
    return cli.run(*args, env=cli.operator_env(runtime, **extra_env))


@pytest.fixture
def audited(runtime, demo: dict[str, Any]) -> int:
    """The demo tenant's log with a few tool calls on top; returns the number of events."""
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    door.call("list_orders", {}, new_trace_id(), None)
    door.call("get_order", {"order_id": demo["orders"]["paid"]}, new_trace_id(), None)
    with runtime.engine.connect() as connection:
        seqs = connection.execute(
            EVENTS.select().where(EVENTS.c.tenant == "demo").with_only_columns(EVENTS.c.seq)
        ).all()
    assert len(seqs) >= 5
    return len(seqs)


def head(runtime) -> tuple[int, str]:
    with runtime.engine.connect() as connection:
        row = connection.execute(
            AuditHead.__table__.select().where(AuditHead.__table__.c.tenant == "demo")  # type: ignore[attr-defined]
        ).one()
    return row.seq, row.hash


def tamper(runtime, statement: Any) -> None:
    with runtime.engine.begin() as connection:
        assert connection.execute(statement).rowcount >= 1


@both_backends
def test_a_clean_log_verifies_with_exit_0(runtime, audited):
    result = run_cli(runtime, "audit", "verify", "--tenant", "demo")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ok")
    seq, hash_ = head(runtime)
    assert f"{audited} events" in result.stdout
    assert f"head seq {seq} hash {hash_}" in result.stdout


def test_json_output_of_a_clean_log(runtime, audited):
    result = run_cli(runtime, "audit", "verify", "--tenant", "demo", "--json")

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"ok", "events_checked", "head", "first_bad_seq"} <= set(report)
    assert set(report["head"]) == {"seq", "hash"}
    assert report["ok"] is True
    assert report["events_checked"] == audited
    assert (report["head"]["seq"], report["head"]["hash"]) == head(runtime)
    assert report["first_bad_seq"] is None


@both_backends
def test_an_edited_event_exits_1_and_names_the_first_bad_seq(runtime, audited):
    tamper(
        runtime,
        update(EVENTS)
        .where((EVENTS.c.tenant == "demo") & (EVENTS.c.seq == 3))
        .values(data={"forged": True}),
    )

    result = run_cli(runtime, "audit", "verify", "--tenant", "demo")

    assert result.exit_code == 1
    output = result.stdout + result.stderr
    assert "first bad seq 3" in output
    assert not result.stdout.startswith("ok")


@both_backends
def test_json_output_of_a_tampered_log(runtime, audited):
    tamper(runtime, delete(EVENTS).where((EVENTS.c.tenant == "demo") & (EVENTS.c.seq == 4)))

    result = run_cli(runtime, "audit", "verify", "--tenant", "demo", "--json")

    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["first_bad_seq"] == 4
    assert report["events_checked"] == 3
    assert report["head"]["seq"] == 3
    assert len(report["head"]["hash"]) == 64
    assert set(report["head"]["hash"]) <= HEX64


@both_backends
def test_a_truncated_tail_exits_1(runtime, audited):
    tamper(runtime, delete(EVENTS).where((EVENTS.c.tenant == "demo") & (EVENTS.c.seq == audited)))

    result = run_cli(runtime, "audit", "verify", "--tenant", "demo", "--json")

    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["first_bad_seq"] == audited
    assert report["events_checked"] == audited - 1


def test_the_tenant_defaults_to_the_configured_default_tenant(runtime, audited):
    tamper(
        runtime,
        update(EVENTS)
        .where((EVENTS.c.tenant == "demo") & (EVENTS.c.seq == 2))
        .values(actor="mallory"),
    )

    default_demo = run_cli(runtime, "audit", "verify", DRAFTGATE_DEFAULT_TENANT="demo")
    default_other = run_cli(runtime, "audit", "verify", "--json", DRAFTGATE_DEFAULT_TENANT="acme")

    assert default_demo.exit_code == 1
    assert "first bad seq 2" in default_demo.stdout + default_demo.stderr
    assert default_other.exit_code == 0, default_other.stderr
    assert json.loads(default_other.stdout)["events_checked"] == 0


def test_checkpoint_commands_without_the_key_fail_cleanly(runtime, audited):
    printed = run_cli(runtime, "audit", "checkpoint-key")
    signed = run_cli(runtime, "audit", "checkpoint")

    for result in (printed, signed):
        assert result.exit_code == 1
        assert result.stderr.startswith("error: CHECKPOINT_KEY_MISSING"), result.stderr
    assert not runtime.settings.resolved_checkpoint_key_file().exists()


# --- offline: --file with a pinned key ------------------------------------------------------


@dataclass
class Offline:
    """What an auditor holds: an export, the checkpoints downloaded with it, a trust file."""

    export: Path
    checkpoints: Path
    trust_file: Path
    public_key: str


def write_export(runtime, path: Path) -> None:
    """The export as ``GET /v1/audit/export`` streams it (the same generator)."""
    path.write_text("".join(review.export_lines(runtime.engine, "demo", EventFilter())))


def write_checkpoints(runtime, path: Path, public_key: str) -> None:
    """The document ``GET /v1/audit/checkpoints`` serves (``draftgate audit checkpoints``)."""
    with Session(runtime.engine) as session:
        listed = [checkpoints.as_dict(c) for c in checkpoints.for_tenant(session, "demo")]
    document = {
        "tenant": "demo",
        "public_key": public_key,
        "key_id": key_id_for(public_key),
        "checkpoints": listed,
    }
    path.write_text(json.dumps(document))


@pytest.fixture
def offline(runtime, audited, tmp_path) -> Offline:
    """The operator makes the key and its trust file and signs the head; the auditor exports."""
    trust = run_cli(runtime, "audit", "checkpoint-key", "--generate", "--json")
    assert trust.exit_code == 0, trust.stderr
    signed = run_cli(runtime, "audit", "checkpoint", "--tenant", "demo")
    assert signed.exit_code == 0, signed.stderr
    public_key = json.loads(trust.stdout)["public_key"]
    held = Offline(
        tmp_path / "audit.ndjson",
        tmp_path / "checkpoints.json",
        tmp_path / "checkpoint-key.json",
        public_key,
    )
    held.trust_file.write_text(trust.stdout)
    write_export(runtime, held.export)
    write_checkpoints(runtime, held.checkpoints, public_key)
    return held


def verify_file(held: Offline, *pinning: str) -> Result:
    """``audit verify --file`` with no DRAFTGATE_* variable at all: no server, no database."""
    return cli.run(
        "audit",
        "verify",
        "--file",
        str(held.export),
        "--checkpoints",
        str(held.checkpoints),
        *pinning,
        env={},
    )


def note(runtime, count: int) -> None:
    for index in range(count):
        with session_scope(runtime.engine) as session:
            audit.record(
                session, tenant="demo", actor="test:a", type="test.note", data={"i": index}
            )


def test_the_trust_file_is_the_checkpoint_keys_public_half(runtime, offline):
    document = json.loads(offline.trust_file.read_text())
    key = checkpoints.load_key(runtime.settings.resolved_checkpoint_key_file())

    assert document == {
        "type": "draftgate.checkpoint_key.v1",
        "public_key": public_key_b64(key),
        "key_id": key_id_for(public_key_b64(key)),
    }
    assert "PRIVATE" not in offline.trust_file.read_text()


def test_a_fully_anchored_export_exits_0_with_the_trust_file_or_the_key(runtime, offline):
    by_file = verify_file(offline, "--trust-file", str(offline.trust_file))
    by_key = verify_file(offline, "--public-key", offline.public_key)
    as_json = verify_file(offline, "--trust-file", str(offline.trust_file), "--json")

    seq, hash_ = head(runtime)
    for result in (by_file, by_key):
        assert result.exit_code == 0, result.stderr
        assert result.stdout.startswith("ok:")
        assert f"head seq {seq} hash {hash_}; 1 checkpoints agree; anchored at seq {seq}" in (
            result.stdout
        )
    assert as_json.exit_code == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    assert (report["ok"], report["anchored"], report["anchored_seq"]) == (True, True, seq)


def test_without_a_pinned_key_the_verifier_refuses_with_exit_2(offline):
    """Before: the key named inside the checkpoints file was trusted (with a warning), so a
    checkpoints file signed by whoever rewrote the log verified ok."""
    result = verify_file(offline)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: no pinned checkpoint key")
    assert "--public-key" in result.stderr
    assert "--trust-file" in result.stderr


def test_a_checkpoints_file_naming_another_key_than_the_pinned_one_fails(runtime, offline):
    """The attacker's own key, named by the file and signing its checkpoints: the pinned key
    is not it, so the file proves nothing and the verdict is a failure, not ok."""
    forger = generate_private_key()
    forged = [
        {
            **checkpoints.statement("demo", c["seq"], c["hash"], c["at"]),
            "key_id": key_id_for(public_key_b64(forger)),
            "signature": sign(
                forger,
                canonical_json(checkpoints.statement("demo", c["seq"], c["hash"], c["at"])),
            ),
        }
        for c in json.loads(offline.checkpoints.read_text())["checkpoints"]
    ]
    offline.checkpoints.write_text(
        json.dumps(
            {
                "tenant": "demo",
                "public_key": public_key_b64(forger),
                "key_id": key_id_for(public_key_b64(forger)),
                "checkpoints": forged,
            }
        )
    )

    pinned = verify_file(offline, "--trust-file", str(offline.trust_file))
    forger_pinned = verify_file(offline, "--public-key", public_key_b64(forger))

    assert pinned.exit_code == 1
    assert "unpinned key never count" in pinned.stderr
    assert key_id_for(public_key_b64(forger)) in pinned.stderr
    assert forger_pinned.exit_code == 0, "pinning the forger's key is the auditor's own choice"


def test_zero_checkpoints_exit_3_unanchored(runtime, audited, tmp_path):
    held = Offline(tmp_path / "a.ndjson", tmp_path / "c.json", tmp_path / "k.json", "")
    write_export(runtime, held.export)
    key = public_key_b64(generate_private_key())
    write_checkpoints(runtime, held.checkpoints, key)  # a file with no checkpoints in it

    result = verify_file(held, "--public-key", key)
    as_json = verify_file(held, "--public-key", key, "--json")

    assert result.exit_code == 3, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("unanchored: truncation of the tail cannot be detected")
    assert f"no checkpoint covers seq 1 to {audited}" in result.stderr
    assert as_json.exit_code == 3
    report = json.loads(as_json.stdout)
    assert (report["ok"], report["anchored"], report["anchored_seq"]) == (True, False, 0)


def test_events_after_the_newest_checkpoint_exit_3(runtime, offline):
    signed_seq, _hash = head(runtime)
    note(runtime, 2)
    write_export(runtime, offline.export)

    result = verify_file(offline, "--trust-file", str(offline.trust_file))
    as_json = verify_file(offline, "--trust-file", str(offline.trust_file), "--json")

    assert result.exit_code == 3, result.stderr
    assert result.stderr.startswith("unanchored: truncation of the tail cannot be detected")
    assert f"seq {signed_seq + 1} to {signed_seq + 2}" in result.stderr
    report = json.loads(as_json.stdout)
    assert (report["ok"], report["anchored"], report["anchored_seq"]) == (True, False, signed_seq)
    assert report["head"]["seq"] == signed_seq + 2


def test_a_tampered_export_exits_1_even_when_unanchored(runtime, offline):
    note(runtime, 1)  # unanchored tail too: tampering still wins
    write_export(runtime, offline.export)
    lines = offline.export.read_text().splitlines(keepends=True)
    edited = json.loads(lines[2])
    edited["actor"] = "approver:mallory"
    lines[2] = json.dumps(edited) + "\n"
    offline.export.write_text("".join(lines))

    result = verify_file(offline, "--trust-file", str(offline.trust_file))

    assert result.exit_code == 1
    assert "TAMPERED: first bad seq 3" in result.stderr


@pytest.mark.parametrize(
    "pinning",
    [
        pytest.param("checkpoints-as-trust-file", id="checkpoints-file-as-trust-file"),
        pytest.param("missing-trust-file", id="missing-trust-file"),
        pytest.param("damaged-trust-file", id="key-id-does-not-match"),
        pytest.param("bad-public-key", id="public-key-not-a-key"),
        pytest.param("both", id="both-ways-of-pinning"),
        pytest.param("unreadable-export", id="export-not-json"),
    ],
)
def test_what_cannot_be_verified_exits_2(offline, pinning):
    args = ["--trust-file", str(offline.trust_file)]
    if pinning == "checkpoints-as-trust-file":
        args = ["--trust-file", str(offline.checkpoints)]  # names a key too: never trusted
    elif pinning == "missing-trust-file":
        args = ["--trust-file", str(offline.trust_file.with_name("nope.json"))]
    elif pinning == "damaged-trust-file":
        document = json.loads(offline.trust_file.read_text())
        document["key_id"] = "ed25519-" + "0" * 16
        offline.trust_file.write_text(json.dumps(document))
    elif pinning == "bad-public-key":
        args = ["--public-key", "not a key!"]
    elif pinning == "both":
        args += ["--public-key", offline.public_key]
    else:
        offline.export.write_text("<html>502 Bad Gateway</html>\n")

    result = verify_file(offline, *args)

    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr


def test_the_database_verify_warns_about_an_unanchored_tail_but_exits_0(runtime, audited):
    result = run_cli(runtime, "audit", "verify", "--tenant", "demo")

    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("warning: unanchored: truncation of the tail")


def test_offline_verify_shows_progress_only_at_a_terminal(offline, monkeypatch):
    from service.cli import progress

    piped = verify_file(offline, "--trust-file", str(offline.trust_file))
    monkeypatch.setattr(progress, "interactive", lambda: True)
    watched = verify_file(offline, "--trust-file", str(offline.trust_file))

    assert piped.exit_code == watched.exit_code == 0, watched.stderr
    assert piped.stderr == "", "a pipe gets no progress"
    assert f"verifying {offline.export.name}" in watched.stderr
    assert watched.stdout == piped.stdout, "progress never touches the output"
