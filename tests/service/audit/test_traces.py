"""``GET /v1/traces/{trace_id}``: one agent interaction, end to end (DESIGN.md §8).

The realistic interaction runs on the whole stack (embedded and PostgreSQL + Redis): an
agent over real MCP with one ``traceparent``, approvers signing through the real API server,
a real Celery worker executing. The trace must tell the same story as the audit log and the
export, event for event. The diagnosis of each kind of failure is checked on its own, against
the API in-process (``httpx.ASGITransport``) on SQLite: the trace's SQL runs on both backends
in the stack tests, the diagnosis is computed from its rows.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.approvals import signed_decision
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.schemas import Decision
from service.errors import DomainError
from service.tracing import new_trace_id
from tests.support.api_client import bearer, get_draft, in_process
from tests.support.mcp_client import connect, error_of

PROBLEM_JSON = "application/problem+json"
REJECTION = "a refund for this order was already issued by phone"


# --- helpers --------------------------------------------------------------------------------


def traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-01"


def auditor(demo: dict[str, Any]) -> dict[str, str]:
    return bearer(demo["tokens"]["auditor"])


def get_trace(api: httpx.Client, demo: dict[str, Any], trace_id: str) -> dict[str, Any]:
    response = api.get(f"/v1/traces/{trace_id}", headers=auditor(demo))
    assert response.status_code == 200, response.text
    view: dict[str, Any] = response.json()
    assert set(view) == {"trace_id", "drafts", "steps", "diagnosis"}
    assert view["trace_id"] == trace_id
    return view


def events(api: httpx.Client, demo: dict[str, Any], **filters: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {**filters, "limit": 7, **({"cursor": cursor} if cursor else {})}
        response = api.get("/v1/audit/events", params=params, headers=auditor(demo))
        assert response.status_code == 200, response.text
        page = response.json()
        found += page["events"]
        cursor = page["next_cursor"]
        if cursor is None:
            return found


def export(api: httpx.Client, demo: dict[str, Any], **filters: str) -> list[dict[str, Any]]:
    response = api.get("/v1/audit/export", params=filters, headers=auditor(demo))
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def decide(
    api: httpx.Client,
    demo: dict[str, Any],
    draft_id: str,
    approver: str,
    decision: Decision = Decision.APPROVE,
    reason: str | None = None,
) -> dict[str, Any]:
    token = demo["tokens"][f"approver_{approver}"]
    body = signed_decision(
        get_draft(api, token, draft_id),
        approver=approver,
        key_file=demo["approvers"][approver]["private_key_file"],
        decision=decision,
        reason=reason,
    )
    response = api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token))
    assert response.status_code == 201, response.text
    detail: dict[str, Any] = response.json()
    return detail


def execute_and_wait(api: httpx.Client, demo: dict[str, Any], draft_id: str) -> dict[str, Any]:
    response = api.post(
        f"/v1/drafts/{draft_id}/execute", headers=bearer(demo["tokens"]["approver_alice"])
    )
    assert response.status_code == 202, response.text
    execution_id = response.json()["execution_id"]
    deadline = time.monotonic() + 90
    while True:
        found = api.get(f"/v1/executions/{execution_id}", headers=auditor(demo)).json()
        if found["status"] in ("succeeded", "failed"):
            return dict(found)
        assert time.monotonic() < deadline, f"the worker never finished: {found}"
        time.sleep(0.05)  # polling the condition, until the deadline


def refund(order_id: str, amount_minor: int, reason: str, **extra: Any) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": reason,
        **extra,
    }


# --- the whole interaction, on the whole stack ----------------------------------------------


@pytest.fixture
def stack_api(stack) -> Iterator[httpx.Client]:
    """A client of the stack's real API server (one connection pool for the whole test)."""
    with httpx.Client(base_url=stack.api_url, timeout=60) as client:
        yield client


@pytest.mark.anyio
async def test_a_trace_tells_the_whole_interaction_as_the_audit_log_does(stack, stack_api):
    demo, api = stack.demo, stack_api
    order = demo["orders"]["delivered"]
    trace_id, header = traceparent()
    async with connect(stack.mcp_url, demo["tokens"]["agent"], traceparent=header) as agent:
        assert not (await agent.call_tool("list_orders", {})).is_error
        assert not (await agent.call_tool("get_order", {"order_id": order})).is_error
        assert not (await agent.call_tool("get_logistics", {"order_id": order})).is_error
        bad = await agent.call_tool("get_order", {"order_id": 12345})
        assert error_of(bad)["code"] == "INVALID_ARGUMENT"
        first = await agent.call_tool("propose_refund", refund(order, 1_500, "damaged"))
        second = await agent.call_tool("propose_refund", refund(order, 2_000, "wrong_item"))
        rejected_id = first.structured_content["draft_id"]
        approved_id = second.structured_content["draft_id"]
        revised = await agent.call_tool(
            "propose_refund", refund(order, 2_500, "wrong_item", draft_id=approved_id)
        )
        assert revised.structured_content["revision"] == 2, revised.content
        unknown = await agent.call_tool("refund", {"order_id": order})
        assert error_of(unknown)["code"] == "UNKNOWN_TOOL"

        decide(api, demo, rejected_id, "alice", Decision.REJECT, REJECTION)
        decide(api, demo, approved_id, "alice")
        execution = execute_and_wait(api, demo, approved_id)
        assert execution["status"] == "succeeded", execution

        status = await agent.call_tool("get_draft", {"draft_id": approved_id})
        assert status.structured_content["status"] == "succeeded"

    view = get_trace(api, demo, trace_id)
    alice_key = demo["approvers"]["alice"]["key_id"]
    label = {rejected_id: "rejected", approved_id: "approved", None: None}

    # Every step, in order.
    story = [
        (s["type"], label[s["draft_id"]], s["data"].get("tool"), s["actor"]) for s in view["steps"]
    ]
    agent_actor, alice, worker = "agent:support-agent", "approver:alice", "system:worker"
    assert story == [
        ("tool.called", None, "list_orders", agent_actor),
        ("tool.called", None, "get_order", agent_actor),
        ("tool.called", None, "get_logistics", agent_actor),
        ("tool.refused", None, "get_order", agent_actor),
        ("draft.proposed", "rejected", None, agent_actor),
        ("tool.called", "rejected", "propose_refund", agent_actor),
        ("draft.proposed", "approved", None, agent_actor),
        ("tool.called", "approved", "propose_refund", agent_actor),
        ("draft.revised", "approved", None, agent_actor),
        ("tool.called", "approved", "propose_refund", agent_actor),
        ("tool.refused", None, "refund", agent_actor),
        ("approval.rejected", "rejected", None, alice),
        ("draft.rejected", "rejected", None, alice),
        ("approval.approved", "approved", None, alice),
        ("draft.approved", "approved", None, alice),
        ("execution.requested", "approved", None, alice),
        ("draft.queued", "approved", None, alice),
        ("execution.started", "approved", None, worker),
        ("draft.running", "approved", None, worker),
        ("execution.succeeded", "approved", None, worker),
        ("draft.succeeded", "approved", None, worker),
        ("tool.called", "approved", "get_draft", agent_actor),
    ]
    seqs = [s["seq"] for s in view["steps"]]
    assert seqs == sorted(set(seqs))
    assert [s["at"] for s in view["steps"]] == sorted(s["at"] for s in view["steps"])

    # Tool calls: tool, masked arguments, outcome, latency.
    steps = view["steps"]
    for step in steps:
        if step["type"] == "tool.called":
            assert step["data"]["outcome"] == "ok"
            assert isinstance(step["data"]["latency_us"], int)
            assert step["data"]["latency_us"] >= 0
            assert isinstance(step["data"]["arguments"], dict)
            assert step["data"]["tool"] in step["summary"]
    assert steps[1]["data"]["arguments"] == {"order_id": order}
    assert steps[5]["data"]["arguments"]["amount"] == {"amount_minor": 1_500, "currency": "USD"}
    assert steps[9]["data"]["arguments"]["draft_id"] == approved_id
    refused = steps[3]["data"]
    assert refused["outcome"] == "refused"
    assert refused["argument_names"] == ["order_id"]
    assert refused["error"]["code"] == "INVALID_ARGUMENT"
    assert "12345" not in json.dumps(refused)
    assert steps[10]["data"]["error"]["code"] == "UNKNOWN_TOOL"
    assert "UNKNOWN_TOOL" in steps[10]["summary"]

    # Approvals and the rejection: approver, key id, reason.
    assert steps[11]["data"]["key_id"] == alice_key
    assert steps[11]["data"]["reason"] == REJECTION
    assert alice_key in steps[11]["summary"]
    assert REJECTION in steps[11]["summary"]
    assert steps[13]["data"]["key_id"] == alice_key
    assert steps[13]["data"]["revision"] == 2

    # Execution: the same execution id throughout, one attempt, an outcome.
    # The draft's own status events name the execution that moved it.
    execution_ids = {s["execution_id"] for s in steps[15:21]}
    assert execution_ids == {execution["execution_id"]}
    assert steps[19]["data"]["outcome"]["refund_id"]
    assert "succeeded" in steps[19]["summary"]

    # The drafts, with revisions, approvals and execution.
    drafts = {d["draft_id"]: d for d in view["drafts"]}
    assert set(drafts) == {rejected_id, approved_id}
    no = drafts[rejected_id]
    assert (no["status"], no["status_reason"], no["execution"]) == ("rejected", REJECTION, None)
    assert [r["revision"] for r in no["revisions"]] == [1]
    assert [(a["approver"], a["key_id"], a["decision"], a["reason"]) for a in no["approvals"]] == [
        ("alice", alice_key, "reject", REJECTION)
    ]
    yes = drafts[approved_id]
    assert yes["status"] == "succeeded"
    assert [(r["revision"], r["trace_id"]) for r in yes["revisions"]] == [
        (1, trace_id),
        (2, trace_id),
    ]
    assert [
        (a["approver"], a["key_id"], a["decision"], a["revision"]) for a in yes["approvals"]
    ] == [("alice", alice_key, "approve", 2)]
    assert yes["execution"]["execution_id"] == execution["execution_id"]
    assert yes["execution"]["status"] == "succeeded"
    assert [(a["number"], a["result"]) for a in yes["execution"]["attempts"]] == [(1, "succeeded")]
    assert yes["execution"]["outcome"]["refund_id"] == steps[19]["data"]["outcome"]["refund_id"]

    assert view["diagnosis"].startswith("succeeded"), view["diagnosis"]

    # The audit log tells exactly that story: the events of the trace and of its drafts.
    by_trace = events(api, demo, trace_id=trace_id)
    by_draft = events(api, demo, draft_id=rejected_id) + events(api, demo, draft_id=approved_id)
    logged = sorted({e["seq"]: e for e in by_trace + by_draft}.values(), key=lambda e: e["seq"])
    assert [e["seq"] for e in logged] == seqs
    for step, event in zip(steps, logged, strict=True):
        assert (step["type"], step["actor"], step["at"], step["data"]) == (
            event["type"],
            event["actor"],
            event["at"],
            event["data"],
        )
        assert (step["draft_id"], step["execution_id"]) == (
            event["draft_id"],
            event["execution_id"],
        )
    assert {e["trace_id"] for e in by_trace} == {trace_id}
    # The agent's own events all carry its trace id; people's carry their requests'.
    assert {e["seq"] for e in by_trace} >= {s["seq"] for s in steps if s["actor"] == agent_actor}

    # And so does the export, line for line.
    exported = {line["seq"]: line for line in export(api, demo)}
    assert [exported[seq] for seq in seqs] == logged
    assert export(api, demo, trace_id=trace_id) == by_trace


# --- the diagnosis of each kind of failure --------------------------------------------------


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def test_an_interaction_whose_only_failure_was_invalid_input_is_diagnosed_arguments(
    demo, api, door
):
    trace_id = new_trace_id()
    door.call("list_orders", {}, trace_id, None)
    with pytest.raises(DomainError) as refused:
        door.call(
            "propose_refund",
            refund(demo["orders"]["delivered"], -5, "damaged"),
            trace_id,
            None,
        )
    assert refused.value.code == "INVALID_ARGUMENT"
    door.call("get_order", {"order_id": demo["orders"]["delivered"]}, trace_id, None)

    view = get_trace(api, demo, trace_id)

    assert view["diagnosis"].startswith("arguments"), view["diagnosis"]
    assert view["drafts"] == []
    assert [s["type"] for s in view["steps"]] == ["tool.called", "tool.refused", "tool.called"]


def test_an_unknown_tool_is_diagnosed_tool_choice(demo, api, door):
    trace_id = new_trace_id()
    door.call("get_order", {"order_id": demo["orders"]["paid"]}, trace_id, None)
    with pytest.raises(DomainError) as refused:
        door.call("cancel_order", {"order_id": demo["orders"]["paid"]}, trace_id, None)
    assert refused.value.code == "UNKNOWN_TOOL"

    view = get_trace(api, demo, trace_id)

    assert view["diagnosis"].startswith("tool choice"), view["diagnosis"]
    assert "cancel_order" in view["diagnosis"]


@pytest.mark.parametrize(
    "settings_overrides", [{"shop_carrier_latency_ms": 200, "shop_carrier_timeout_ms": 20}]
)
def test_a_carrier_slower_than_its_timeout_is_diagnosed_timeout(demo, api, door):
    trace_id = new_trace_id()
    door.call("get_order", {"order_id": demo["orders"]["shipped"]}, trace_id, None)
    with pytest.raises(DomainError) as refused:
        door.call("get_logistics", {"order_id": demo["orders"]["shipped"]}, trace_id, None)
    assert refused.value.code == "UPSTREAM_TIMEOUT"

    view = get_trace(api, demo, trace_id)

    assert "timeout" in view["diagnosis"].split(":")[0], view["diagnosis"]
    assert view["steps"][-1]["data"]["error"]["code"] == "UPSTREAM_TIMEOUT"


def test_a_rejected_draft_is_diagnosed_human_decision(demo, api, door):
    trace_id = new_trace_id()
    draft = door.call(
        "propose_refund", refund(demo["orders"]["delivered"], 900, "goodwill"), trace_id, None
    )

    decide(api, demo, draft["draft_id"], "bob", Decision.REJECT, REJECTION)
    view = get_trace(api, demo, trace_id)

    assert view["diagnosis"].startswith("human decision"), view["diagnosis"]
    assert REJECTION in view["diagnosis"]
    [rejected] = view["drafts"]
    assert rejected["approvals"][0]["approver"] == "bob"
    assert rejected["approvals"][0]["key_id"] == demo["approvers"]["bob"]["key_id"]
    assert [s["type"] for s in view["steps"]] == [
        "draft.proposed",
        "tool.called",
        "approval.rejected",
        "draft.rejected",
    ]


def test_an_execution_that_failed_on_a_business_rule_is_diagnosed_business_rule(stack, stack_api):
    demo, api = stack.demo, stack_api
    door = ToolDoor(stack.runtime, stdio_token=demo["tokens"]["agent"])
    order = demo["orders"]["paid"]
    first_trace, second_trace = new_trace_id(), new_trace_id()
    first = door.call(
        "propose_cancel_order", {"order_id": order, "reason": "customer_request"}, first_trace, None
    )
    second = door.call(
        "propose_cancel_order", {"order_id": order, "reason": "duplicate_order"}, second_trace, None
    )
    for draft in (first, second):
        decide(api, demo, draft["draft_id"], "alice")

    assert execute_and_wait(api, demo, first["draft_id"])["status"] == "succeeded"
    failed = execute_and_wait(api, demo, second["draft_id"])  # the order is cancelled by now

    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "ORDER_NOT_CANCELLABLE"
    view = get_trace(api, demo, second_trace)
    assert view["diagnosis"].startswith("business rule"), view["diagnosis"]
    assert [s["type"] for s in view["steps"][-2:]] == ["execution.failed", "draft.failed"]
    assert get_trace(api, demo, first_trace)["diagnosis"].startswith("succeeded")


# --- unknown traces -------------------------------------------------------------------------


def test_an_unknown_trace_is_404_trace_unavailable(demo, api):
    """BUG for ids longer than 32 characters: the route builds EventFilter(trace_id=…) whose
    max_length=32 raises a pydantic ValidationError inside the handler → 500."""
    for trace_id in (
        secrets.token_hex(16),  # well-formed
        "not-a-trace",
        "f" * 33,
        "a" * 64,
    ):
        response = api.get(f"/v1/traces/{trace_id}", headers=auditor(demo))

        assert response.status_code in (400, 404), (trace_id, response.text)
        assert response.headers["content-type"].split(";")[0] == PROBLEM_JSON
        if response.status_code == 404:
            assert response.json()["code"] == "TRACE_UNAVAILABLE"


def test_a_trace_of_another_agents_interaction_is_still_visible_to_the_auditor(demo, api, runtime):
    other = ToolDoor(runtime, stdio_token=demo["tokens"]["agent_other_customer"])
    trace_id = new_trace_id()
    other.call("get_order", {"order_id": demo["orders"]["other_customer"]}, trace_id, None)

    view = get_trace(api, demo, trace_id)

    assert [s["type"] for s in view["steps"]] == ["tool.called"]
    assert view["diagnosis"].startswith("no failure"), view["diagnosis"]
