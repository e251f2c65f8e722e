"""The auditor at a terminal: ``draftgate audit …`` and ``draftgate trace``, in-process.

The CLI talks to a real API (one per module and backend, reset for each test; on SQLite, and
on PostgreSQL too where the database is the point) with an auditor token from
``DRAFTGATE_API_URL`` and ``DRAFTGATE_TOKEN``. ``audit verify --file`` needs neither a server
nor a database: it runs once as the installed command with nothing but ``PATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import Session, col, select
from typer.testing import Result

from harness.approvals import bearer, get_draft, signed_decision
from mcp_adapter.tools import ToolDoor
from service.approvals.schemas import Decision
from service.audit import checkpoints
from service.audit.chain import event_hash
from service.audit.models import AuditEvent, AuditHead
from service.db import session_scope
from service.errors import DomainError
from service.signing import generate_private_key, public_key_b64
from service.sql import utcnow
from service.tracing import new_trace_id
from tests.support import cli
from tests.support.backends import both_backends

DRAFTGATE = Path(sys.executable).parent / "draftgate"
EVENTS = AuditEvent.__table__  # type: ignore[attr-defined]
HEADS = AuditHead.__table__  # type: ignore[attr-defined]
TABLE_HEADER = ["SEQ", "AT", "TYPE", "ACTOR", "DRAFT", "TRACE", "DETAIL"]


@pytest.fixture
def runtime(served: cli.Served):
    return served.runtime


@pytest.fixture
def demo(served: cli.Served) -> dict[str, Any]:
    return served.demo


@pytest.fixture
def api(served: cli.Served) -> str:
    return served.url


@pytest.fixture
def interaction(runtime, demo, api) -> dict[str, Any]:
    """An agent interaction with a refusal and a rejected draft, then a checkpoint."""
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    trace_id = new_trace_id()
    door.call("list_orders", {}, trace_id, None)
    with pytest.raises(DomainError):
        door.call("get_order", {"order_id": 7}, trace_id, None)
    draft = door.call(
        "propose_refund",
        {
            "order_id": demo["orders"]["delivered"],
            "amount": {"amount_minor": 1_999, "currency": "USD"},
            "reason": "late_delivery",
        },
        trace_id,
        None,
    )
    token = demo["tokens"]["approver_bob"]
    body = signed_decision(
        get_draft(api, token, draft["draft_id"]),
        approver="bob",
        key_file=demo["approvers"]["bob"]["private_key_file"],
        decision=Decision.REJECT,
        reason="not late",
    )
    response = httpx.post(
        f"{api}/v1/drafts/{draft['draft_id']}/approvals",
        json=body,
        headers=bearer(token),
        timeout=30,
    )
    assert response.status_code == 201, response.text
    key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    with session_scope(runtime.engine) as session:
        assert checkpoints.create(session, key, now=utcnow())
    return {"trace_id": trace_id, "draft_id": draft["draft_id"], "public_key": public_key_b64(key)}


def run(*args: str, env: dict[str, str]) -> Result:
    return cli.run(*args, env=env)


def auditor_env(api: str, token: str) -> dict[str, str]:
    return {"DRAFTGATE_API_URL": api, "DRAFTGATE_TOKEN": token}


def as_auditor(api: str, demo: dict[str, Any], *args: str) -> Result:
    return run(*args, env=auditor_env(api, demo["tokens"]["auditor"]))


def db_events(runtime) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent).where(col(AuditEvent.tenant) == "demo").order_by(col(AuditEvent.seq))
        )
        return list(session.exec(statement).all())


def export_to(api: str, demo: dict[str, Any], path: Path) -> None:
    result = as_auditor(api, demo, "audit", "export", "--out", str(path))
    assert result.exit_code == 0, result.stderr


def checkpoints_to(api: str, demo: dict[str, Any], path: Path) -> None:
    result = as_auditor(api, demo, "audit", "checkpoints", "--out", str(path))
    assert result.exit_code == 0, result.stderr


def verify_offline(workdir: Path, *args: str, public_key: str | None = None) -> Result:
    """``audit verify`` with no DRAFTGATE_* variable at all, run from ``workdir``."""
    extra = ["--public-key", public_key] if public_key else []
    with contextlib.chdir(workdir):
        return run("audit", "verify", *args, *extra, env={})


def verify_offline_installed(
    workdir: Path, *args: str, public_key: str
) -> subprocess.CompletedProcess[str]:
    """The installed ``draftgate audit verify`` with an environment of nothing but ``PATH``."""
    return subprocess.run(
        [str(DRAFTGATE), "audit", "verify", *args, "--public-key", public_key],
        env={"PATH": os.environ["PATH"]},
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def no_traceback(result: Result) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


# --- audit events ---------------------------------------------------------------------------


@both_backends
def test_audit_events_prints_a_readable_table(runtime, demo, api, interaction):
    result = as_auditor(api, demo, "audit", "events", "--limit", "500")

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == TABLE_HEADER
    events = db_events(runtime)
    rows = lines[1:]
    assert len(rows) == len(events)
    for row, event in zip(rows, events, strict=True):
        cells = row.split()
        assert cells[0] == str(event.seq)
        assert cells[1] == event.at.strftime("%Y-%m-%dT%H:%M:%S")
        assert cells[2] == event.type
        assert cells[3] == event.actor
    refused = next(r for r in rows if " tool.refused " in r)
    assert "INVALID_ARGUMENT" in refused
    assert interaction["trace_id"] in refused, "trace ids are never shortened"
    assert "more: --cursor" not in result.stdout

    full = as_auditor(api, demo, "audit", "events", "--limit", "500", "--full")
    assert full.exit_code == 0, full.stderr
    refused = next(r for r in full.stdout.splitlines()[1:] if " tool.refused " in r)
    assert interaction["trace_id"] in refused


def test_a_trace_id_copied_from_the_events_table_opens_the_trace(demo, api, interaction):
    table = as_auditor(api, demo, "audit", "events", "--type", "tool.refused").stdout
    header, row = table.splitlines()[:2]
    copied = row[header.index("TRACE") :].split()[0]  # what a person selects and copies

    result = as_auditor(api, demo, "trace", copied)

    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"trace {interaction['trace_id']}"


@both_backends
def test_audit_events_filters_and_pages_with_the_printed_cursor(runtime, demo, api, interaction):
    first = as_auditor(
        api, demo, "audit", "events", "--trace", interaction["trace_id"], "--limit", "2"
    )
    assert first.exit_code == 0, first.stderr
    cursor = first.stdout.strip().splitlines()[-1].removeprefix("more: --cursor ")
    rest = as_auditor(
        api, demo, "audit", "events", "--trace", interaction["trace_id"], "--cursor", cursor
    )
    assert rest.exit_code == 0, rest.stderr

    seqs = [
        int(line.split()[0])
        for output in (first.stdout, rest.stdout)
        for line in output.splitlines()[1:]
        if line[:1].isdigit()
    ]
    expected = [e.seq for e in db_events(runtime) if e.trace_id == interaction["trace_id"]]
    assert seqs == expected
    typed = as_auditor(api, demo, "audit", "events", "--type", "draft.rejected")
    assert [line.split()[2] for line in typed.stdout.splitlines()[1:]] == ["draft.rejected"]


def test_audit_events_json_is_the_apis_page(demo, api, interaction):
    result = as_auditor(
        api, demo, "audit", "events", "--json", "--draft", interaction["draft_id"], "--limit", "3"
    )

    assert result.exit_code == 0, result.stderr
    page = json.loads(result.stdout)
    expected = httpx.get(
        f"{api}/v1/audit/events",
        params={"draft_id": interaction["draft_id"], "limit": 3},
        headers=bearer(demo["tokens"]["auditor"]),
        timeout=30,
    ).json()
    assert page == expected
    assert [e["type"] for e in page["events"]] == [
        "draft.proposed",
        "tool.called",
        "approval.rejected",
    ]


def test_audit_events_with_a_naive_time_or_a_non_auditor_token_fails_cleanly(demo, api):
    naive = as_auditor(api, demo, "audit", "events", "--since", "2026-11-30T10:00:00")
    approver = run("audit", "events", env=auditor_env(api, demo["tokens"]["approver_alice"]))
    nobody = run("audit", "events", env=auditor_env(api, "dg_" + "n" * 43))

    for result, code in (
        (naive, "INVALID_ARGUMENT"),
        (approver, "PERMISSION_DENIED"),
        (nobody, "UNAUTHENTICATED"),
    ):
        assert result.exit_code == 1
        assert code in result.stderr
        no_traceback(result)


# --- export and checkpoints -----------------------------------------------------------------


@both_backends
def test_audit_export_writes_the_whole_log_as_ndjson(runtime, demo, api, interaction, tmp_path):
    out = tmp_path / "audit.ndjson"

    result = as_auditor(api, demo, "audit", "export", "--out", str(out))

    assert result.exit_code == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    *events, own = db_events(runtime)
    assert [(line["seq"], line["hash"]) for line in lines] == [(e.seq, e.hash) for e in events]
    assert f"exported {len(lines)} events to {out}" in result.stdout
    # The export is recorded, right after the head it stopped at.
    assert (own.type, own.actor, own.seq) == ("audit.exported", "auditor:audrey", len(lines) + 1)


def test_audit_checkpoints_writes_the_signed_checkpoints(demo, api, interaction, tmp_path):
    out = tmp_path / "checkpoints.json"

    result = as_auditor(api, demo, "audit", "checkpoints", "--out", str(out))

    assert result.exit_code == 0, result.stderr
    document = json.loads(out.read_text())
    assert (
        document
        == httpx.get(
            f"{api}/v1/audit/checkpoints", headers=bearer(demo["tokens"]["auditor"]), timeout=30
        ).json()
    )
    assert document["public_key"] == interaction["public_key"]
    assert len(document["checkpoints"]) == 1
    assert document["key_id"] in result.stdout


@both_backends
def test_the_operator_prints_the_key_to_pin_and_checkpoints_on_demand(runtime, demo, api):
    env = cli.operator_env(
        runtime,
        DRAFTGATE_CHECKPOINT_KEY_FILE=str(runtime.settings.resolved_checkpoint_key_file()),
    )

    generated = run("audit", "checkpoint-key", "--generate", env=env)
    made = run("audit", "checkpoint", env=env)
    again = run("audit", "checkpoint", env=env)

    assert generated.exit_code == 0, generated.stderr
    pinned = generated.stdout.split("public key:")[1].split()[0]
    served = httpx.get(
        f"{api}/v1/audit/checkpoints", headers=bearer(demo["tokens"]["auditor"]), timeout=30
    ).json()
    assert served["public_key"] == pinned
    assert made.exit_code == 0, made.stderr
    assert [c["seq"] for c in served["checkpoints"]] == [db_events(runtime)[-1].seq]
    assert "nothing new to checkpoint" in again.stdout


# --- verify ---------------------------------------------------------------------------------


def test_offline_verify_of_a_clean_export_exits_0_without_server_or_database(
    demo, api, interaction, tmp_path
):
    export_to(api, demo, tmp_path / "audit.ndjson")
    checkpoints_to(api, demo, tmp_path / "checkpoints.json")
    workdir = tmp_path / "empty"
    workdir.mkdir()

    result = verify_offline_installed(
        workdir,
        "--file",
        str(tmp_path / "audit.ndjson"),
        "--checkpoints",
        str(tmp_path / "checkpoints.json"),
        public_key=interaction["public_key"],
    )
    as_json = verify_offline(
        workdir,
        "--json",
        "--file",
        str(tmp_path / "audit.ndjson"),
        "--checkpoints",
        str(tmp_path / "checkpoints.json"),
        public_key=interaction["public_key"],
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok:")
    assert "1 checkpoints agree" in result.stdout
    assert as_json.exit_code == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    lines = (tmp_path / "audit.ndjson").read_text().splitlines()
    assert report["ok"] is True
    assert report["events_checked"] == len(lines)
    assert report["head"]["hash"] == json.loads(lines[-1])["hash"]
    assert report["checkpoints_checked"] == 1
    assert list(workdir.iterdir()) == [], "verifying offline created no state"


def test_offline_verify_of_a_tampered_export_exits_1_naming_the_first_bad_seq(
    runtime, demo, api, interaction, tmp_path
):
    export_to(api, demo, tmp_path / "clean.ndjson")
    clean = (tmp_path / "clean.ndjson").read_text().splitlines(keepends=True)
    edited = json.loads(clean[4])
    edited["actor"] = "approver:mallory"
    (tmp_path / "edited.ndjson").write_text(
        "".join([*clean[:4], json.dumps(edited) + "\n", *clean[5:]])
    )
    (tmp_path / "dropped.ndjson").write_text("".join(clean[:6] + clean[7:]))

    pinned = interaction["public_key"]
    edited_result = verify_offline(
        tmp_path, "--file", str(tmp_path / "edited.ndjson"), public_key=pinned
    )
    dropped_result = verify_offline(
        tmp_path, "--file", str(tmp_path / "dropped.ndjson"), public_key=pinned
    )

    assert edited_result.exit_code == 1
    assert "TAMPERED: first bad seq 5" in edited_result.stderr
    assert dropped_result.exit_code == 1
    assert "TAMPERED: first bad seq 7" in dropped_result.stderr


@both_backends
def test_offline_verify_catches_a_rewritten_database_with_the_saved_checkpoints(
    runtime, demo, api, interaction, tmp_path
):
    checkpoints_to(api, demo, tmp_path / "checkpoints.json")  # saved before the attack
    events = db_events(runtime)
    previous = None
    with runtime.engine.begin() as connection:  # edit seq 3, recompute every later hash
        for event in events:
            if event.seq < 3:
                previous = event.hash
                continue
            row = event.model_dump()
            if event.seq == 3:
                row["data"] = {"rewritten": True}
            row["prev_hash"] = previous
            row["hash"] = event_hash(row)
            previous = row["hash"]
            connection.execute(
                update(EVENTS)
                .where(EVENTS.c.id == event.id)
                .values(data=row["data"], prev_hash=row["prev_hash"], hash=row["hash"])
            )
        connection.execute(update(HEADS).where(HEADS.c.tenant == "demo").values(hash=previous))
    export_to(api, demo, tmp_path / "audit.ndjson")

    without = verify_offline(
        tmp_path, "--file", str(tmp_path / "audit.ndjson"), public_key=interaction["public_key"]
    )
    checked = verify_offline(
        tmp_path,
        "--file",
        str(tmp_path / "audit.ndjson"),
        "--checkpoints",
        str(tmp_path / "checkpoints.json"),
        public_key=interaction["public_key"],
    )

    assert without.exit_code == 3, "the chain alone was rewritten consistently: unanchored"
    assert without.stderr.startswith("unanchored: truncation of the tail cannot be detected")
    assert checked.exit_code == 1
    checkpointed = json.loads((tmp_path / "checkpoints.json").read_text())["checkpoints"][0]
    assert f"TAMPERED: first bad seq {checkpointed['seq']}" in checked.stderr
    assert "rewritten" in checked.stderr


def test_offline_verify_with_a_wrong_public_key_exits_1(demo, api, interaction, tmp_path):
    export_to(api, demo, tmp_path / "audit.ndjson")
    checkpoints_to(api, demo, tmp_path / "checkpoints.json")
    wrong = public_key_b64(generate_private_key())

    result = verify_offline(
        tmp_path,
        "--file",
        str(tmp_path / "audit.ndjson"),
        "--checkpoints",
        str(tmp_path / "checkpoints.json"),
        public_key=wrong,
    )

    assert result.exit_code == 1
    assert "unpinned key never count" in result.stderr


def test_offline_verify_without_a_pinned_key_refuses_to_trust_the_file(
    demo, api, interaction, tmp_path
):
    export_to(api, demo, tmp_path / "audit.ndjson")
    checkpoints_to(api, demo, tmp_path / "checkpoints.json")

    result = verify_offline(
        tmp_path,
        "--file",
        str(tmp_path / "audit.ndjson"),
        "--checkpoints",
        str(tmp_path / "checkpoints.json"),
    )

    assert result.exit_code == 2
    assert result.stderr.startswith("error: no pinned checkpoint key")
    assert result.stdout == ""


@pytest.mark.parametrize(
    "problem",
    [
        pytest.param("missing-file", id="missing-export"),
        pytest.param("not-json", id="export-not-json"),
        pytest.param("no-tenant", id="export-line-without-tenant"),
        pytest.param("checkpoints-not-json", id="checkpoints-not-json"),
        pytest.param("checkpoints-missing", id="checkpoints-missing"),
        pytest.param("bad-public-key", id="public-key-not-base64url"),
    ],
)
def test_offline_verify_of_unusable_input_fails_with_a_message_not_a_traceback(
    demo, api, interaction, tmp_path, problem
):
    """BUG: only ExportError/OSError raised while reading the export are caught. A line
    missing ``tenant`` (KeyError), a checkpoints file that is not JSON or does not exist
    (read before the try), or a --public-key that is not base64url (ValueError in
    key_id_for) end in a Python traceback."""
    export_to(api, demo, tmp_path / "audit.ndjson")
    checkpoints_to(api, demo, tmp_path / "checkpoints.json")
    export, cps, key = (
        tmp_path / "audit.ndjson",
        tmp_path / "checkpoints.json",
        interaction["public_key"],
    )
    if problem == "missing-file":
        export = tmp_path / "nope.ndjson"
    elif problem == "not-json":
        export.write_text("this is not an export\n")
    elif problem == "no-tenant":
        first, *rest = export.read_text().splitlines(keepends=True)
        line = json.loads(first)
        del line["tenant"]
        export.write_text(json.dumps(line) + "\n" + "".join(rest))
    elif problem == "checkpoints-not-json":
        cps.write_text("<html>502 Bad Gateway</html>")
    elif problem == "checkpoints-missing":
        cps = tmp_path / "nope.json"
    else:
        key = "not a key!"

    result = verify_offline(
        tmp_path, "--file", str(export), "--checkpoints", str(cps), public_key=key
    )

    assert result.exit_code != 0
    assert result.stderr.strip().startswith(("error:", "TAMPERED")), result.stderr
    no_traceback(result)


@both_backends
def test_audit_verify_through_the_api(runtime, demo, api, interaction):
    clean = as_auditor(api, demo, "audit", "verify")
    clean_json = as_auditor(api, demo, "audit", "verify", "--json")
    with runtime.engine.begin() as connection:
        connection.execute(
            update(EVENTS)
            .where((EVENTS.c.tenant == "demo") & (EVENTS.c.seq == 2))
            .values(type="test.harmless")
        )
    tampered = as_auditor(api, demo, "audit", "verify")

    assert clean.exit_code == 0, clean.stderr
    assert clean.stdout.startswith("ok:")
    assert "1 checkpoints agree" in clean.stdout
    assert json.loads(clean_json.stdout)["checkpoints_checked"] == 1
    assert tampered.exit_code == 1
    assert "TAMPERED: first bad seq 2" in tampered.stderr


# --- trace ----------------------------------------------------------------------------------


@both_backends
def test_trace_shows_a_readable_timeline_with_the_diagnosis(demo, api, interaction):
    result = as_auditor(api, demo, "trace", interaction["trace_id"])
    as_json = as_auditor(api, demo, "trace", interaction["trace_id"], "--json")

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"trace {interaction['trace_id']}"
    assert lines[1].strip() == f"draft {interaction['draft_id']} (refund): rejected"
    view = json.loads(as_json.stdout)
    steps = [line for line in lines if "#" in line]
    assert len(steps) == len(view["steps"])
    for line, step in zip(steps, view["steps"], strict=True):
        assert f"#{step['seq']}" in line
        assert step["actor"] in line
        assert step["summary"] in line
        assert step["at"][11:23] in line
    assert "list_orders" in steps[0]
    assert "INVALID_ARGUMENT" in steps[1]
    bob_key = demo["approvers"]["bob"]["key_id"]
    [rejection] = [line for line in steps if bob_key in line]  # who rejected, with which key
    assert "approver:bob" in rejection
    assert "not late" in rejection
    assert lines[-1] == f"diagnosis: {view['diagnosis']}"
    assert view["diagnosis"].startswith("human decision")


def test_trace_of_an_unknown_id_fails_cleanly(demo, api):
    result = as_auditor(api, demo, "trace", "0" * 31 + "1")

    assert result.exit_code == 1
    assert "TRACE_UNAVAILABLE" in result.stderr
    no_traceback(result)
