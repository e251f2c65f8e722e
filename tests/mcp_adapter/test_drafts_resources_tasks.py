"""An agent's drafts as MCP resources and tasks, and pushed changes (issue 19), over real
streamable HTTP: the SDK's client, with and without the tasks extension, and a listen stream
read off the wire. Approvals are made through the core (as the API would) while the agent
follows; the whole stack with its worker is tests/workers/test_agent_loop.py."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from sqlalchemy import update
from sqlmodel import select

from harness.approvals import signed_decision
from harness.mcp_tasks import (
    cancel_task,
    get_task,
    listen,
    propose_as_task,
    tasks_client,
)
from service.approvals import actions as approvals
from service.approvals.schemas import ApprovalRequest
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft
from service.principal import Role
from service.sql import utcnow
from service.tokens import actions as tokens
from service.validation import parse
from tests.support.core import approve_in_core, reject_in_core
from tests.support.mcp_client import connect, error_of
from tests.support.mcp_helpers import module_host_fixtures

pytestmark = pytest.mark.anyio

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

SMALL = {"amount_minor": 1500, "currency": "USD"}  # one approver
LARGE = {"amount_minor": 60_000, "currency": "USD"}  # two approvers


def refund(demo: dict[str, Any], amount: dict[str, Any] = SMALL) -> dict[str, Any]:
    return {"order_id": demo["orders"]["delivered"], "amount": amount, "reason": "damaged"}


def token(runtime: Any, *, subject: str, tenant: str = "demo", user: str = "cust-ada") -> str:
    with session_scope(runtime.engine) as session:
        issued = tokens.issue(
            session, tenant=tenant, subject=subject, role=Role.AGENT, on_behalf_of=user, actor="t"
        )
    return issued.token


def events(runtime: Any, type_: str, draft_id: str) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(
            AuditEvent.type == type_, AuditEvent.draft_id == draft_id
        )
        return list(session.exec(statement).all())


# --- resources ---------------------------------------------------------------------------


async def test_a_proposal_links_to_its_resource_which_reads_as_get_draft(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool("propose_refund", refund(demo))
        view = proposed.structured_content
        uri = f"draftgate://drafts/{view['draft_id']}"
        assert view["resource_uri"] == uri
        assert view["poll_after_seconds"] == 30
        links = [block for block in proposed.content if block.type == "resource_link"]
        assert [str(link.uri) for link in links] == [uri]

        read = await agent.read_resource(uri)
        got = await agent.call_tool("get_draft", {"draft_id": view["draft_id"]})
        (contents,) = read.contents
        assert contents.mime_type == "application/json"
        assert json.loads(contents.text) == got.structured_content
        assert [b.type for b in got.content] == ["text", "resource_link"]

        listed = await agent.list_resources()
        assert [str(r.uri) for r in listed.resources] == [uri]
        assert listed.resources[0].description == view["summary"]
        templates = await agent.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == [
            "draftgate://drafts/{draft_id}"
        ]


async def test_resources_list_pages_and_leaves_out_ended_drafts(mcp_url, demo, runtime):
    from service.toolcalls import actions as toolcalls

    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        ids = []
        for minor in range(1, toolcalls.DRAFT_PAGE_SIZE + 3):
            args = refund(demo, {"amount_minor": minor, "currency": "USD"})
            ids.append(
                (await agent.call_tool("propose_refund", args)).structured_content["draft_id"]
            )
        reject_in_core(runtime, demo, ids[0], "no")
        first = await agent.list_resources()
        assert len(first.resources) == toolcalls.DRAFT_PAGE_SIZE
        assert first.next_cursor
        second = await agent.list_resources(cursor=first.next_cursor)
        assert second.next_cursor is None
        listed = [str(r.uri).rsplit("/", 1)[1] for r in first.resources + second.resources]
        assert sorted(listed) == sorted(ids[1:])  # newest first, the rejected one left out
        with pytest.raises(MCPError) as refused:
            await agent.list_resources(cursor=first.next_cursor[:-2] + "xx")
        assert refused.value.error.code == -32602


async def test_another_agent_user_or_tenant_finds_no_such_resource(mcp_url, demo, runtime):
    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        draft_id = (await agent.call_tool("propose_refund", refund(demo))).structured_content[
            "draft_id"
        ]
    uri = f"draftgate://drafts/{draft_id}"
    strangers = {
        "another user": demo["tokens"]["agent_other_customer"],
        "another agent": token(runtime, subject="other-agent"),
        "another tenant": token(runtime, subject="support-agent", tenant="shop-b"),
    }
    unknown = f"draftgate://drafts/dft_{'0' * 32}"
    for who, secret in strangers.items():
        async with connect(mcp_url, secret) as stranger:
            answers = []
            for target in (uri, unknown, "file:///etc/passwd"):
                with pytest.raises(MCPError) as refused:
                    await stranger.read_resource(target)
                answers.append((refused.value.error.code, refused.value.error.message))
            assert answers[0] == (-32602, f"Resource not found: {uri}"), who
            assert answers[1][0] == answers[2][0] == -32602, who
            assert (await stranger.list_resources()).resources == [], who
            got = await stranger.call_tool("get_draft", {"draft_id": draft_id})
            assert error_of(got)["code"] == "DRAFT_UNAVAILABLE", who


# --- tasks -------------------------------------------------------------------------------


async def test_a_proposal_is_a_task_that_follows_the_draft_to_its_rejection(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo, LARGE))
        assert created["resultType"] == "task"
        assert created["status"] == "working"
        assert created["statusMessage"] == "waiting for 2 of 2 approvals"
        assert created["ttlMs"] == 86_400_000
        assert created["pollIntervalMs"] == 30_000
        draft_id, revision = created["taskId"].split(".r")
        assert revision == "1"

        approve_in_core(runtime, demo, draft_id, "alice")
        state = await get_task(agent, created["taskId"])
        assert (state["status"], state["statusMessage"]) == (
            "working",
            "waiting for 1 of 2 approvals",
        )
        assert state["resultType"] == "complete"
        assert "result" not in state

        reject_in_core(runtime, demo, draft_id, "the customer kept the parcel")
        state = await get_task(agent, created["taskId"])
    assert state["status"] == "completed"
    assert "the customer kept the parcel" in state["statusMessage"]
    result = state["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["status"] == "rejected"
    assert result["structuredContent"]["reason"] == "the customer kept the parcel"
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


async def test_an_approved_task_waits_for_execution_and_cannot_be_cancelled(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
        draft_id = created["taskId"].split(".r")[0]
        approve_in_core(runtime, demo, draft_id, "alice")
        state = await get_task(agent, created["taskId"])
        assert (state["status"], state["statusMessage"]) == (
            "working",
            "approved, waiting for execution",
        )
        with pytest.raises(MCPError) as refused:
            await cancel_task(agent, created["taskId"])
    assert refused.value.error.code == -32600
    assert "can no longer be withdrawn" in refused.value.error.message
    assert refused.value.error.data["code"] == "DRAFT_NOT_WITHDRAWABLE"


async def test_cancelling_a_task_withdraws_its_draft_once(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
        assert (await cancel_task(agent, created["taskId"]))["resultType"] == "complete"
        state = await get_task(agent, created["taskId"])
        assert state["status"] == "cancelled"
        await cancel_task(agent, created["taskId"])  # nothing more happens
        again = await propose_as_task(agent, "propose_refund", refund(demo))
    draft_id = created["taskId"].split(".r")[0]
    assert again["taskId"] != created["taskId"]  # withdrawn is final: a new draft
    withdrawn = events(runtime, "draft.withdrawn", draft_id)
    assert len(withdrawn) == 1
    assert withdrawn[0].actor.startswith("agent:")
    with session_scope(runtime.engine) as session:
        assert session.get(Draft, draft_id).status == "withdrawn"
        principal = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        stored = drafts_repository.get(session, "demo", draft_id)
        body = signed_decision(
            {
                "tenant": "demo",
                "draft_id": draft_id,
                "revision": 1,
                "action": "refund",
                "contract_version": stored.contract_version,
                "params_sha256": stored.params_sha256,
            },
            approver="alice",
            key_file=demo["approvers"]["alice"]["private_key_file"],
        )
    from service.errors import DomainError

    with pytest.raises(DomainError), session_scope(runtime.engine) as session:
        approvals.submit(
            session,
            tokens.authenticate(session, demo["tokens"]["approver_alice"]),
            draft_id=draft_id,
            request=parse(ApprovalRequest, body),
            runtime=runtime,
            now=utcnow(),
        )
    assert principal.role is Role.APPROVER


async def test_an_expired_draft_ends_its_task_and_a_revision_supersedes_it(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        first = await propose_as_task(agent, "propose_refund", refund(demo))
        draft_id = first["taskId"].split(".r")[0]
        revised = await propose_as_task(
            agent, "propose_refund", {**refund(demo, LARGE), "draft_id": draft_id}
        )
        assert revised["taskId"] == f"{draft_id}.r2"
        old = await get_task(agent, first["taskId"])
        assert old["status"] == "cancelled"
        assert f"follow task {draft_id}.r2" in old["statusMessage"]
        with session_scope(runtime.engine) as session:
            session.execute(
                update(Draft)
                .where(Draft.id == draft_id)
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )
        state = await get_task(agent, revised["taskId"])
    assert state["status"] == "completed"
    assert state["result"]["structuredContent"]["status"] == "expired"
    assert "expired" in state["statusMessage"]


async def test_without_the_extension_nothing_is_a_task(mcp_url, demo):
    async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool("propose_refund", refund(demo))
        assert proposed.structured_content["status"] == "proposed"
        task_id = f"{proposed.structured_content['draft_id']}.r1"
        with pytest.raises(MCPError) as refused:
            await get_task(agent, task_id)
    assert refused.value.error.code == -32021
    assert refused.value.error.data == {
        "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    }


async def test_another_principals_task_is_not_found(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
    strangers = [demo["tokens"]["agent_other_customer"], token(runtime, subject="other-agent")]
    for secret in strangers:
        async with tasks_client(mcp_url, secret) as stranger:
            for task_id in (created["taskId"], f"dft_{'0' * 32}.r1", "not-a-task", "x" * 5000):
                for call in (get_task, cancel_task):
                    with pytest.raises(MCPError) as refused:
                        await call(stranger, task_id)
                    assert refused.value.error.code == -32602
                    assert refused.value.error.message == "Failed to retrieve task: Task not found"
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        assert (await get_task(agent, created["taskId"]))["status"] == "working"


# --- push ------------------------------------------------------------------------------


async def test_a_listen_stream_pushes_each_change_of_the_callers_drafts(mcp_url, demo, runtime):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo, LARGE))
    task_id = created["taskId"]
    draft_id = task_id.split(".r")[0]
    uri = f"draftgate://drafts/{draft_id}"
    stranger_draft = f"draftgate://drafts/dft_{'1' * 32}"
    wanted = {"resourceSubscriptions": [uri, stranger_draft], "taskIds": [task_id]}
    seen: list[tuple[float, dict[str, Any]]] = []
    async with listen(mcp_url, demo["tokens"]["agent"], wanted) as frames:
        ack = await anext(frames)
        assert ack.get("method") == "notifications/subscriptions/acknowledged", ack
        assert ack["params"]["notifications"] == {
            "resourceSubscriptions": [uri],
            "taskIds": [task_id],
        }
        now = await anext(frames)  # where the task stands when the stream opens
        assert now["method"] == "notifications/tasks"
        assert now["params"]["statusMessage"] == "waiting for 2 of 2 approvals"

        async def decide() -> None:
            for step in (
                lambda: approve_in_core(runtime, demo, draft_id, "alice"),
                lambda: reject_in_core(runtime, demo, draft_id, "changed our mind"),
            ):
                await anyio.sleep(0.3)
                seen.append((time.monotonic(), {"step": True}))
                await anyio.to_thread.run_sync(step)

        async with anyio.create_task_group() as group:
            group.start_soon(decide)
            with anyio.fail_after(20):
                async for frame in frames:
                    seen.append((time.monotonic(), frame))
                    if "result" in frame:  # the stream's graceful end
                        break
    frames_only = [f for _, f in seen if "step" not in f]
    methods = [f.get("method", "result") for f in frames_only]
    assert methods == [
        "notifications/resources/updated",
        "notifications/tasks",
        "notifications/resources/updated",
        "notifications/tasks",
        "result",
    ], methods
    assert all(f["params"]["uri"] == uri for f in frames_only if "uri" in f.get("params", {}))
    tasks = [f["params"] for f in frames_only if f.get("method") == "notifications/tasks"]
    assert tasks[0]["statusMessage"] == "waiting for 1 of 2 approvals"
    assert tasks[1]["status"] == "completed"
    assert tasks[1]["result"]["structuredContent"]["reason"] == "changed our mind"
    assert all(
        f["params"]["_meta"] == {"io.modelcontextprotocol/subscriptionId": 1}
        for f in frames_only[:-1]
    )


async def test_listening_for_tasks_needs_the_extension_and_is_bounded(mcp_url, demo):
    asked = {"taskIds": [f"dft_{'0' * 32}.r1"]}
    async with listen(mcp_url, demo["tokens"]["agent"], asked, tasks=False) as frames:
        answer = await anext(frames)
    assert answer["error"]["code"] == -32021
    too_many = {"resourceSubscriptions": [f"draftgate://drafts/dft_{i:032x}" for i in range(101)]}
    async with listen(mcp_url, demo["tokens"]["agent"], too_many) as frames:
        answer = await anext(frames)
    assert answer["error"]["code"] == -32602
    # Nothing it may follow: acknowledged with nothing, and closed at once.
    nothing = {"resourceSubscriptions": [f"draftgate://drafts/dft_{'0' * 32}"]}
    async with listen(mcp_url, demo["tokens"]["agent"], nothing) as frames:
        received = [frame async for frame in frames]
    assert received[0]["params"]["notifications"] == {}
    assert "result" in received[-1]


async def test_a_revoked_token_ends_its_listen_stream(mcp_url, demo, runtime):
    secret = token(runtime, subject="support-agent")
    async with tasks_client(mcp_url, secret) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
    draft_id = created["taskId"].split(".r")[0]
    wanted = {"resourceSubscriptions": [f"draftgate://drafts/{draft_id}"]}
    async with listen(mcp_url, secret, wanted) as frames:
        assert (await anext(frames))["method"] == "notifications/subscriptions/acknowledged"
        with session_scope(runtime.engine) as session:
            principal = tokens.authenticate(session, secret)
            tokens.revoke(session, tenant="demo", token_id=principal.token_id, actor="admin:t")
        await anyio.to_thread.run_sync(approve_in_core, runtime, demo, draft_id)
        with anyio.fail_after(20):
            last = await anext(frames)
    assert last["error"]["code"] == -32600
    assert "revoked" in last["error"]["message"]


async def test_listen_filters_and_task_ids_are_checked(mcp_url, demo):
    for bad in ([{"a": 1}], [[1]], 5, True, "abc", [None], ["x" * 300]):
        async with listen(mcp_url, demo["tokens"]["agent"], {"taskIds": bad}) as frames:
            answer = await anext(frames)
        assert answer["error"]["code"] == -32602, bad
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
        for spelling in (created["taskId"] + "\n", created["taskId"].replace(".r1", ".r2")):
            with pytest.raises(MCPError) as refused:
                await get_task(agent, spelling)
            # Not found; a header cannot carry the newline, so that spelling may be
            # refused first as a mismatched Mcp-Name.
            assert refused.value.error.code in {-32602, -32020}, spelling


async def test_a_task_named_differently_in_mcp_name_is_refused(mcp_url, demo):
    async with tasks_client(mcp_url, demo["tokens"]["agent"]) as agent:
        created = await propose_as_task(agent, "propose_refund", refund(demo))
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tasks/get",
        "params": {
            "taskId": created["taskId"],
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}}
                },
            },
        },
    }
    headers = {
        "Authorization": f"Bearer {demo['tokens']['agent']}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx2.AsyncClient(timeout=30) as http:
        other = await http.post(mcp_url, json=body, headers={**headers, "Mcp-Name": "dft_x.r1"})
        same = await http.post(
            mcp_url, json=body, headers={**headers, "Mcp-Name": created["taskId"]}
        )
    assert other.json()["error"]["code"] == -32020
    assert same.json()["result"]["status"] == "working"
