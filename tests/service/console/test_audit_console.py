"""The auditor's console and the inbox's history (issue 20.6): the audit log with filters
and pages, the chain's state and latest checkpoint, the export, one draft's timeline with
the agent's reads of the same conversation; approvers and auditors see only their tenant."""

from __future__ import annotations

import json
from typing import Any

from mcp_adapter.tools import ToolDoor
from service.audit import checkpoints
from service.db import session_scope
from service.principal import Role
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.service.console.console import page, same_origin, signed_in
from tests.support.backends import both_backends
from tests.support.core import approve_in_core, reject_in_core


def propose(door: ToolDoor, amount_minor: int, order: str = "ORD-1004") -> str:
    arguments = {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def rows(element: Any, table: str) -> list[dict[str, str]]:
    body = element.by_id(table).find_all("tbody")[0]
    return [row.attrs for row in body.find_all("tr") if "data-seq" in row.attrs]


@both_backends
def test_an_auditor_finds_a_drafts_whole_conversation_and_the_chains_state(
    browser, runtime, demo, door
):
    read_trace = new_trace_id()  # the agent read the order under a trace of its own
    door.call("get_order", {"order_id": "ORD-1004"}, read_trace, None)
    draft_id = propose(door, 2_500)
    approve_in_core(runtime, demo, draft_id)
    key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    with session_scope(runtime.engine) as session:
        assert checkpoints.create(session, key, now=utcnow())
    signed_in(browser, demo["tokens"]["auditor"])

    log = page(browser, "/console/audit")
    state = log.by_id("chain-state")
    assert state.attrs["data-ok"] == "true"
    assert "The chain verifies" in state.text
    assert "Latest checkpoint: #" in log.by_id("latest-checkpoint").text
    assert {"tool.called", "draft.proposed", "draft.approved"} <= {
        r["data-type"] for r in rows(log, "events")
    }
    assert page(browser, "/console/").by_id("nav-audit").attrs["href"] == "/console/audit"

    # As the form sends it: its empty fields too.
    query = f"type=&actor=&draft_id={draft_id}&trace_id="
    filtered = rows(page(browser, f"/console/audit?{query}"), "events")
    assert {"draft.proposed", "approval.approved"} <= {r["data-type"] for r in filtered}
    assert "tool.called" in {r["data-type"] for r in filtered}  # the propose call names it

    timeline = page(browser, f"/console/audit/drafts/{draft_id}")
    lines = rows(timeline, "timeline")
    how = {(r["data-type"], r["data-how"]) for r in lines}
    assert ("tool.called", "same agent and end user, nearby") in how  # the earlier read
    assert ("tool.called", "this draft") in how  # the proposal itself
    assert ("approval.approved", "this draft") in how
    assert [int(r["data-seq"]) for r in lines] == sorted(int(r["data-seq"]) for r in lines)
    assert "within 30 minutes" in timeline.by_id("correlation").text


def test_the_export_is_the_filtered_log_as_ndjson_and_is_audited(browser, runtime, demo, door):
    draft_id = propose(door, 2_500)
    csrf = signed_in(browser, demo["tokens"]["auditor"])

    response = browser.post(
        f"/console/audit/export?draft_id={draft_id}",
        data={"csrf_token": csrf},
        headers=same_origin(browser),
    )

    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in response.text.splitlines()]
    assert events
    assert {e["draft_id"] for e in events} == {draft_id}
    exported = rows(page(browser, "/console/audit?type=audit.exported"), "events")
    assert len(exported) == 1
    refused = browser.post(
        "/console/audit/export", data={"csrf_token": "wrong"}, headers=same_origin(browser)
    )
    assert refused.status_code == 403


def test_only_auditors_see_the_log_and_only_their_tenants(browser, runtime, demo, door, acme):
    ours = propose(door, 2_500)
    other = acme
    theirs = propose(ToolDoor(runtime, stdio_token=other["tokens"]["agent"]), 1_000)

    signed_in(browser, demo["tokens"]["approver_alice"])
    assert browser.get("/console/audit").status_code == 403
    browser.cookies.clear()
    signed_in(browser, other["tokens"]["auditor"])
    listed = {r.get("data-type") for r in rows(page(browser, "/console/audit"), "events")}
    assert listed  # their own tenant's events
    assert browser.get(f"/console/audit/drafts/{ours}").status_code == 404
    assert rows(page(browser, f"/console/audit?draft_id={ours}"), "events") == []
    assert rows(page(browser, f"/console/audit/drafts/{theirs}"), "timeline")


def test_an_error_page_keeps_the_navigation(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    response = browser.get("/console/drafts/dft_" + "0" * 32)
    assert response.status_code == 404
    assert 'id="sign-out"' in response.text
    assert 'href="/console/keys"' in response.text
    assert 'class="code muted">DRAFT_UNAVAILABLE' in response.text


@both_backends
def test_the_inbox_shows_history_filtered_by_status_date_and_approver(browser, runtime, demo, door):
    approved = propose(door, 2_500)
    rejected = propose(door, 2_600)
    waiting = propose(door, 2_700)
    approve_in_core(runtime, demo, approved, "alice")
    reject_in_core(runtime, demo, rejected, "not this one", approver="bob")
    signed_in(browser, demo["tokens"]["approver_alice"])

    def listed(query: str) -> list[str]:
        body = page(browser, f"/console/?{query}").by_id("inbox-rows")
        return [r.attrs["data-draft-id"] for r in body.find_all("tr") if "data-draft-id" in r.attrs]

    assert listed("status=rejected") == [rejected]
    assert set(listed("status=decided")) == {rejected}  # approved is still open
    assert set(listed("status=open")) == {approved, waiting}
    assert listed("status=rejected&approver=alice") == []
    assert listed("status=rejected&approver=bob") == [rejected]
    assert listed("status=rejected&since=2999-01-01") == []
    assert listed("status=rejected&since=2000-01-01") == [rejected]


@both_backends
def test_a_control_character_in_a_filter_is_a_400_not_a_5xx(browser, demo):
    auditor = {"Authorization": f"Bearer {demo['tokens']['auditor']}"}
    for path in ("/v1/audit/events?actor=%00", "/v1/audit/events?type=a%0Ab"):
        assert browser.get(path, headers=auditor).status_code == 400, path
    signed_in(browser, demo["tokens"]["auditor"])
    assert browser.get("/console/audit?actor=%00").status_code == 400
    assert browser.get("/console/?status=decided&approver=%00").status_code == 400


def test_the_same_agent_for_another_end_user_is_not_in_a_drafts_conversation(
    browser, runtime, demo, door
):
    trace = new_trace_id()
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
    }
    draft_id = door.call("propose_refund", arguments, trace, None)["draft_id"]
    with session_scope(runtime.engine) as session:  # the same agent, serving someone else
        other = tokens.issue(
            session,
            tenant="demo",
            subject="support-agent",
            role=Role.AGENT,
            on_behalf_of="cust-bob",
            actor="test",
        )
    elsewhere = ToolDoor(runtime, stdio_token=other.token)
    elsewhere.call("list_orders", {}, trace, None)  # under the draft's own trace id
    signed_in(browser, demo["tokens"]["auditor"])

    lines = rows(page(browser, f"/console/audit/drafts/{draft_id}"), "timeline")

    calls = [r for r in lines if r["data-type"] == "tool.called"]
    assert [r["data-how"] for r in calls] == ["this draft"]  # the proposal only
