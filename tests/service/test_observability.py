"""Logs and traces of the whole stack (issue 12), as real processes: ``draftgate dev``.

API, MCP server, worker and beat run as ``draftgate dev`` starts them, with JSON logs at
DEBUG, and (in the traced run) a real OTLP/HTTP receiver as their exporter's endpoint. One
agent proposes a refund over MCP with a ``traceparent``; an approver approves and executes
it over the API in the same trace; the worker runs it. Then:

- traced: one trace holds the MCP tool call, the approval request and the worker's task,
  each span's parent in the trace, and the trace id is the audit's;
- both runs: every line of every component's log is a JSON object naming a trace, the
  flow's lines name the client's trace (the worker's too: it travelled in the task), and
  no secret of the demo appears anywhere in the logs.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness.approvals import bearer, signed_decision
from harness.dev import draftgate_dev
from service.approvals.schemas import Decision
from service.telemetry import ENDPOINT_VARIABLES
from tests.service.audit.test_no_secrets import key_secrets, refused_credentials
from tests.support.mcp_client import connect
from tests.support.otlp import ReceivedSpan, Receiver, otlp_receiver

pytestmark = pytest.mark.full

SERVER = 2  # SpanKind.SERVER in OTLP
LOGS = {"api.log", "mcp.log", "worker.log", "beat.log"}
# celery.apps.worker's shutdown notices (safe_say: a print, framed by empty lines).
CELERY_SIGNAL_NOTICE = re.compile(r"^$|^worker: (Warm|Cold) shutdown|^worker: Hitting Ctrl\+C")


async def propose(mcp_url: str, manifest: dict[str, Any], traceparent: str) -> str:
    async with connect(mcp_url, manifest["tokens"]["agent"], traceparent=traceparent) as agent:
        result = await agent.call_tool(
            "propose_refund",
            {
                "order_id": manifest["orders"]["delivered"],
                "amount": {"amount_minor": 1_500, "currency": "USD"},
                "reason": "damaged",
                "idempotency_key": "ticket-" + secrets.token_hex(4),
            },
        )
    assert not result.is_error, result.content
    return str(result.structured_content["draft_id"])  # type: ignore[index]


def approve_and_execute(
    api: str, manifest: dict[str, Any], draft_id: str, traceparent: str
) -> tuple[str, str]:
    """As alice, in the client's trace: (execution id once it succeeded, the signature)."""
    token = manifest["tokens"]["approver_alice"]
    headers = {**bearer(token), "traceparent": traceparent}
    draft = httpx.get(f"{api}/v1/drafts/{draft_id}", headers=headers, timeout=30).json()
    body = signed_decision(
        draft,
        approver="alice",
        key_file=manifest["approvers"]["alice"]["private_key_file"],
        decision=Decision.APPROVE,
    )
    approved = httpx.post(
        f"{api}/v1/drafts/{draft_id}/approvals", json=body, headers=headers, timeout=30
    )
    assert approved.status_code == 201, approved.text
    accepted = httpx.post(f"{api}/v1/drafts/{draft_id}/execute", headers=headers, timeout=30)
    assert accepted.status_code == 202, accepted.text
    execution_id = str(accepted.json()["execution_id"])
    deadline = time.monotonic() + 90
    while True:
        found = httpx.get(f"{api}/v1/executions/{execution_id}", headers=headers, timeout=30)
        status = found.json()["status"]
        if status in ("succeeded", "failed"):
            assert status == "succeeded", found.text
            return execution_id, str(body["signature"])
        assert time.monotonic() < deadline, f"the worker never finished: {found.text}"
        time.sleep(0.05)  # polling the condition, until the deadline


def audited_trace(api: str, manifest: dict[str, Any], trace_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{api}/v1/traces/{trace_id}", headers=bearer(manifest["tokens"]["auditor"]), timeout=30
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def log_records(log_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every line of every component's log, parsed: each must be one JSON object, except
    the notices Celery's worker prints on a signal (outside logging, to the real stderr)."""
    records: dict[str, list[dict[str, Any]]] = {}
    not_json = []
    for name in sorted(LOGS):
        lines = (log_dir / name).read_text().splitlines()
        assert lines, f"{name} is empty"
        records[name] = []
        for line in lines:
            try:
                records[name].append(json.loads(line))
            except json.JSONDecodeError:
                if not (name == "worker.log" and CELERY_SIGNAL_NOTICE.match(line)):
                    not_json.append(f"{name}: {line}")
    assert not not_json, "\n".join(not_json)
    return records


def worker_span_of(receiver: Receiver, trace_id: str) -> ReceivedSpan | None:
    return next(
        (
            span
            for span in receiver.in_trace(trace_id)
            if span.service == "draftgate-worker" and span.name == "run/draftgate.execute"
        ),
        None,
    )


def check_one_trace(receiver: Receiver, trace_id: str, client_span: str, draft_id: str) -> None:
    spans = receiver.in_trace(trace_id)
    by_id = {span.span_id: span for span in spans}

    def one(service: str, name: str) -> ReceivedSpan:
        found = [s for s in spans if s.service == service and s.name == name]
        assert len(found) == 1, (service, name, [(s.service, s.name) for s in spans])
        return found[0]

    def ancestors(span: ReceivedSpan) -> list[ReceivedSpan]:
        chain = []
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            chain.append(span)
        return chain

    tool = one("draftgate-mcp", "draftgate.call_tool propose_refund")
    assert tool.attributes["gen_ai.tool.name"] == "propose_refund"
    assert tool.attributes["draftgate.outcome"] == "ok"
    assert tool.attributes["draftgate.draft_id"] == draft_id
    assert not any("amount" in key or "reason" in key for key in tool.attributes)
    # Inside the SDK's span of the message, inside the HTTP request's: the client's child.
    sdk_message, mcp_request = ancestors(tool)[:2]
    assert sdk_message.name == "tools/call propose_refund"
    assert (mcp_request.name, mcp_request.kind) == ("POST /mcp", SERVER)
    assert mcp_request.parent_span_id == client_span

    approval = one("draftgate-api", "POST /v1/drafts/{draft_id}/approvals")
    assert approval.parent_span_id == client_span
    execute = one("draftgate-api", "POST /v1/drafts/{draft_id}/execute")

    worker = one("draftgate-worker", "run/draftgate.execute")
    assert worker.parent_span_id in by_id, "the worker's parent is not in the trace"
    assert execute in ancestors(worker), "the worker's task does not descend from execute"
    # SQL spans of the runtime's engines: the core's statements, inside the request spans.
    for span in (tool, approval, worker):
        assert any(s.attributes.get("db.system") for s in spans if span in ancestors(s)), span


@pytest.mark.parametrize("traced", [True, False], ids=["traced", "untraced"])
def test_one_flow_is_one_trace_with_json_logs_that_name_it_and_no_secret(tmp_path, traced):
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    traceparent = f"00-{trace_id}-{client_span}-01"
    unknown_token = "dg_" + secrets.token_urlsafe(32)
    state_dir = tmp_path / "state"
    env = {"DRAFTGATE_LOG_FORMAT": "json", "DRAFTGATE_LOG_LEVEL": "DEBUG"}
    env |= dict.fromkeys(ENDPOINT_VARIABLES, "")  # untraced whatever the environment says
    with otlp_receiver() as receiver:
        if traced:
            env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with draftgate_dev(state_dir, tmp_path / "dev.log", **env) as dev:
            manifest = dev.manifest()
            draft_id = anyio.run(propose, dev.mcp_url, manifest, traceparent)
            execution_id, signature = approve_and_execute(
                dev.api_url, manifest, draft_id, traceparent
            )
            sent = refused_credentials(manifest, unknown_token)
            audited = audited_trace(dev.api_url, manifest, trace_id)
            if traced:
                receiver.wait_for(lambda r: worker_span_of(r, trace_id) is not None, "worker span")
            code, _ = dev.interrupt()
            assert code == 0, dev.output()
        if traced:
            check_one_trace(receiver, trace_id, client_span, draft_id)
    assert [d["draft_id"] for d in audited["drafts"]] == [draft_id]  # the audit's trace id

    records = log_records(state_dir / "logs")
    for name, lines in records.items():
        assert all("trace_id" in line for line in lines), name
    flow = [line for lines in records.values() for line in lines if line["trace_id"] == trace_id]
    assert any(line.get("path") == "/mcp" for line in records["mcp.log"] if line in flow)
    approvals = f"/v1/drafts/{draft_id}/approvals"
    assert any(
        line.get("path") == approvals and line.get("draft_id") == draft_id
        for line in records["api.log"]
        if line in flow
    ), "the approval's access line names the trace and the draft"
    assert any(
        line.get("execution_id") == execution_id for line in records["worker.log"] if line in flow
    ), "the worker's lines name the trace and the execution"

    text = "\n".join((state_dir / "logs" / name).read_text() for name in LOGS)
    forbidden = {f"token {name}": token for name, token in manifest["tokens"].items()}
    forbidden["unknown token"] = unknown_token
    forbidden.update({f"Authorization {value[:12]}": value for value in sent})
    for approver in ("alice", "bob"):
        forbidden.update(key_secrets(Path(manifest["approvers"][approver]["private_key_file"])))
    forbidden.update(key_secrets(state_dir / "checkpoint-key.pem"))
    forbidden["alice's signature"] = signature
    leaked = [what for what, secret in forbidden.items() if secret in text]
    assert not leaked, leaked
