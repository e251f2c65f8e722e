"""``draftgate audit verify`` as an operator runs it, in-process, against the test database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import delete, update
from typer.testing import Result

from mcp_adapter.tools import ToolDoor
from service.audit.models import AuditEvent, AuditHead
from service.tracing import new_trace_id
from tests.support import cli
from tests.support.cli import both_backends

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
