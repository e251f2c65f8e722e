"""No secret is ever written anywhere, and no raw PII reaches the audit log (docs/audit.md).

A whole ``draftgate dev`` stack runs as a subprocess (API, MCP, worker, beat) with its
output captured. A realistic session is driven with the manifest's tokens: MCP reads and
proposals, refused calls and credentials, approvals signed with the key files, executions,
an export. After a clean stop, the export, the captured output of every process and a full
dump of every table of every database file are searched for each secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from harness.approvals import bearer, get_draft, signed_decision
from harness.dev import draftgate_dev
from service.approvals.schemas import Decision
from tests.support.mcp_client import connect, error_of

pytestmark = pytest.mark.full

CHECKPOINT_EVERY_SECOND = {"DRAFTGATE_CHECKPOINT_INTERVAL_SECONDS": "1"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
DEMO_PII = ["+447700900123", "+12025550147", "12 St James's Square", "SW1Y 4JH"]
ADA_ADDRESS = {  # the demo customer's own details, corrected recipient: PII in the arguments
    "recipient": "Ada King, Countess of Lovelace",
    "lines": ["12 St James's Square"],
    "district": "St James's",
    "city": "London",
    "postal_code": "SW1Y 4JH",
    "country": "GB",
    "phone": "+447700900123",
}


# --- the session ----------------------------------------------------------------------------


def refund_arguments(order: str, amount_minor: int) -> dict[str, Any]:
    return {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        "idempotency_key": "ticket-" + secrets.token_hex(4),
    }


async def agent_session(manifest: dict[str, Any]) -> dict[str, str]:
    orders, url = manifest["orders"], manifest["mcp_url"]
    header = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
    async with connect(url, manifest["tokens"]["agent"], traceparent=header) as agent:
        for tool, arguments in (
            ("list_orders", {}),
            ("get_order", {"order_id": orders["delivered"]}),
            ("get_order", {"order_id": orders["paid"]}),
            ("get_logistics", {"order_id": orders["delivered"]}),
        ):
            result = await agent.call_tool(tool, arguments)
            assert not result.is_error, result.content
        refund = await agent.call_tool(
            "propose_refund", refund_arguments(orders["delivered"], 2_500)
        )
        readdress = await agent.call_tool(
            "propose_change_shipping_address",
            {"order_id": orders["paid"], "address": ADA_ADDRESS},
        )
        assert not refund.is_error, refund.content
        assert not readdress.is_error, readdress.content
        # Refused: invalid values that carry PII (a lower-case country code).
        invalid = await agent.call_tool(
            "propose_change_shipping_address",
            {"order_id": orders["paid"], "address": {**ADA_ADDRESS, "country": "gb"}},
        )
        assert error_of(invalid)["code"] == "INVALID_ARGUMENT"
        # Refused: another customer's order.
        stranger = await agent.call_tool("get_order", {"order_id": orders["other_customer"]})
        assert error_of(stranger)["code"] == "ORDER_UNAVAILABLE"
        unknown = await agent.call_tool("refund", {"order_id": orders["delivered"]})
        assert error_of(unknown)["code"] == "UNKNOWN_TOOL"
        drafts = {
            "refund": refund.structured_content["draft_id"],
            "readdress": readdress.structured_content["draft_id"],
        }
        for draft_id in drafts.values():
            assert not (await agent.call_tool("get_draft", {"draft_id": draft_id})).is_error
    async with connect(url, manifest["tokens"]["agent_other_customer"]) as other:
        grace = await other.call_tool("get_order", {"order_id": orders["other_customer"]})
        assert not grace.is_error, grace.content
    return drafts


def refused_credentials(manifest: dict[str, Any], unknown: str) -> list[str]:
    """Present wrong credentials at both doors; returns every Authorization value sent."""
    tokens = manifest["tokens"]
    api, mcp = manifest["api_url"], manifest["mcp_url"]
    sent = []
    for value in (
        f"Bearer {unknown}",
        f"Bearer {tokens['approver_alice']}",  # not an agent: refused at the MCP door
        f"Bearer {tokens['admin']}",
        f"Bearer {tokens['agent']}x",  # a mangled real token
        f"Basic {base64.b64encode(('audrey:' + tokens['auditor']).encode()).decode()}",
    ):
        response = httpx.post(
            mcp, json=LIST_TOOLS, headers={**MCP_HEADERS, "Authorization": value}, timeout=30
        )
        assert response.status_code == 401, response.text
        sent.append(value)
    for value in (
        f"Bearer {unknown}",
        f"Bearer {tokens['agent']}",  # an agent may not read the audit log: 403
        f"Bearer {tokens['approver_bob']}",
        f"Bearer {tokens['auditor']} extra",
    ):
        response = httpx.get(f"{api}/v1/audit/events", headers={"Authorization": value}, timeout=30)
        assert response.status_code in (401, 403), response.text
        sent.append(value)
    return sent


def approve_and_execute(manifest: dict[str, Any], draft_id: str) -> None:
    api = manifest["api_url"]
    token = manifest["tokens"]["approver_alice"]
    body = signed_decision(
        get_draft(api, token, draft_id),
        approver="alice",
        key_file=manifest["approvers"]["alice"]["private_key_file"],
        decision=Decision.APPROVE,
    )
    approved = httpx.post(
        f"{api}/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token), timeout=30
    )
    assert approved.status_code == 201, approved.text
    accepted = httpx.post(f"{api}/v1/drafts/{draft_id}/execute", headers=bearer(token), timeout=30)
    assert accepted.status_code == 202, accepted.text
    execution_id = accepted.json()["execution_id"]
    deadline = time.monotonic() + 90
    while True:
        found = httpx.get(
            f"{api}/v1/executions/{execution_id}",
            headers=bearer(manifest["tokens"]["auditor"]),
            timeout=30,
        ).json()
        if found["status"] in ("succeeded", "failed"):
            assert found["status"] == "succeeded", found
            return
        assert time.monotonic() < deadline, f"the worker never finished: {found}"
        time.sleep(0.05)  # polling the condition, until the deadline


def reject(manifest: dict[str, Any], draft_id: str) -> None:
    api, token = manifest["api_url"], manifest["tokens"]["approver_bob"]
    body = signed_decision(
        get_draft(api, token, draft_id),
        approver="bob",
        key_file=manifest["approvers"]["bob"]["private_key_file"],
        decision=Decision.REJECT,
        reason="please confirm the amount with the customer",
    )
    response = httpx.post(
        f"{api}/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token), timeout=30
    )
    assert response.status_code == 201, response.text


def wait_for_a_checkpoint(manifest: dict[str, Any]) -> str:
    deadline = time.monotonic() + 60
    while True:
        response = httpx.get(
            f"{manifest['api_url']}/v1/audit/checkpoints",
            headers=bearer(manifest["tokens"]["auditor"]),
            timeout=30,
        )
        assert response.status_code == 200, response.text
        if response.json()["checkpoints"]:
            return response.text
        assert time.monotonic() < deadline, "beat made no checkpoint"
        time.sleep(0.1)  # polling the condition, until the deadline


# --- what must never appear -----------------------------------------------------------------


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def key_secrets(path: Path) -> dict[str, str]:
    """The PEM body of a PKCS#8 Ed25519 key file and its 32-byte seed in every usual spelling."""
    pem = path.read_text()
    body = "".join(line for line in pem.splitlines() if not line.startswith("-----"))
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    seed = key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    assert len(seed) == 32
    der = base64.b64decode(body)
    assert der.endswith(seed)
    return {
        f"{path.name} PEM body": body,
        f"{path.name} seed base64": b64(seed).rstrip("="),
        f"{path.name} seed base64url": base64.urlsafe_b64encode(seed).decode().rstrip("="),
        f"{path.name} seed hex": seed.hex(),
    }


def dump_databases(state_dir: Path) -> str:
    """Every row of every table of every SQLite file in the state dir, as text."""
    files = sorted(state_dir.rglob("*.db"))
    assert {f.name for f in files} >= {"draftgate.db", "broker.db"}, files
    parts = []
    for path in files:
        connection = sqlite3.connect(path)
        try:
            tables = [
                name
                for (name,) in connection.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            ]
            assert tables, path
            for table in tables:
                for row in connection.execute(f'SELECT * FROM "{table}"'):
                    cells = [
                        cell.decode("latin-1") if isinstance(cell, bytes) else str(cell)
                        for cell in row
                    ]
                    parts.append(f"{path.name}:{table}: " + " | ".join(cells))
        finally:
            connection.close()
    return "\n".join(parts)


def raw_database_files(state_dir: Path) -> str:
    """The bytes of the database files, freed pages and WAL included."""
    return "\n".join(
        path.read_bytes().decode("latin-1")
        for path in sorted(state_dir.rglob("*"))
        if path.is_file() and (path.suffix == ".db" or path.name.endswith(("-wal", "-journal")))
    )


def test_no_secret_appears_in_exports_logs_or_databases(tmp_path):
    unknown_token = "dg_" + secrets.token_urlsafe(32)
    # Beat signs the head promptly.
    with draftgate_dev(tmp_path / "state", tmp_path / "dev.log", **CHECKPOINT_EVERY_SECOND) as dev:
        manifest = dev.manifest()
        drafts = anyio.run(agent_session, manifest)
        sent_headers = refused_credentials(manifest, unknown_token)
        approve_and_execute(manifest, drafts["readdress"])
        reject(manifest, drafts["refund"])
        checkpoints_document = wait_for_a_checkpoint(manifest)
        exported = httpx.get(
            f"{manifest['api_url']}/v1/audit/export",
            headers=bearer(manifest["tokens"]["auditor"]),
            timeout=60,
        )
        assert exported.status_code == 200, exported.text
        export = exported.text
        code, _ = dev.interrupt()  # Ctrl-C: a clean stop of the whole tree
        assert code == 0, dev.output()

    logs = dev.output()
    tables = dump_databases(dev.state_dir)
    raw = raw_database_files(dev.state_dir)
    places = {"export": export, "logs": logs, "tables": tables, "database files": raw}
    forbidden: dict[str, str] = {f"token {name}": t for name, t in manifest["tokens"].items()}
    forbidden["unknown token"] = unknown_token
    forbidden.update({f"Authorization: {value[:16]}…": value for value in sent_headers})
    forbidden.update(
        {f"Authorization: Bearer {name}": f"Bearer {t}" for name, t in manifest["tokens"].items()}
    )
    for approver in ("alice", "bob"):
        forbidden.update(key_secrets(Path(manifest["approvers"][approver]["private_key_file"])))
    forbidden.update(key_secrets(dev.state_dir / "checkpoint-key.pem"))

    # The session really happened and was recorded.
    types = {json.loads(line)["type"] for line in export.splitlines()}
    assert {
        "tool.called",
        "tool.refused",
        "draft.proposed",
        "auth.refused",
        "audit.query.refused",
        "approval.approved",
        "execution.succeeded",
    } <= types, types
    assert "audit.exported" in tables  # recorded, though after the head the export stops at
    assert json.loads(checkpoints_document)["checkpoints"]
    # The searches can find what they look for: the dump holds the token digests and the
    # shop's own copy of the customers' details, the log holds dev's announcement.
    for token in manifest["tokens"].values():
        assert hashlib.sha256(token.encode()).hexdigest() in tables
    assert all(value in tables for value in DEMO_PII)
    assert "draftgate is running" in logs

    leaks = [
        f"{secret_name} in {place}"
        for secret_name, secret in forbidden.items()
        for place, text in places.items()
        if secret in text
    ]
    assert leaks == []

    pii_leaks = [value for value in DEMO_PII if value in export]
    assert pii_leaks == [], "raw PII of the demo customers reached the audit log"
    assert "+44******0123" in export, "phones are masked, first 3 and last 4 kept"
