"""Fuzzing the MCP methods on an agent's drafts (issue 19): ``resources/read|list``,
``tasks/get|cancel|update`` and ``subscriptions/listen``, sent as raw JSON-RPC over real
streamable HTTP (2026-07-28, the tasks extension declared or not), with ids, URIs, cursors
and filters that hypothesis makes: any JSON in place of a string, hostile and huge text,
real ids of the caller's and of other principals' drafts, near-misses of the formats.

Whatever the model sends, the door answers a result or a JSON-RPC error that names the
caller's mistake: never an HTTP 5xx, never -32603, and nothing of another principal's draft.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.fuzz_support import SCALE, hostile_text
from tests.support.mcp_client import connect
from tests.support.mcp_helpers import module_host_fixtures

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

EXAMPLES = 150 * SCALE
TASKS = "io.modelcontextprotocol/tasks"
METHODS = ("resources/read", "resources/list", "tasks/get", "tasks/cancel", "tasks/update")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture
def drafts(mcp_url, demo) -> dict[str, str]:
    """One proposal of the caller's and one of another end user's: real ids to mix in."""

    async def propose(token: str, order: str) -> str:
        async with connect(mcp_url, token) as agent:
            result = await agent.call_tool(
                "propose_refund",
                {
                    "order_id": demo["orders"][order],
                    "amount": {"amount_minor": 100, "currency": "USD"},
                    "reason": "damaged",
                },
            )
            return str(result.structured_content["draft_id"])

    with start_blocking_portal() as portal:
        own = portal.call(propose, demo["tokens"]["agent"], "delivered")
        other = portal.call(propose, demo["tokens"]["agent_other_customer"], "other_customer")
    return {"own": own, "other": other}


def ids(drafts: dict[str, str]) -> st.SearchStrategy[Any]:
    real = [drafts["own"], drafts["other"]]
    spellings = st.sampled_from(real).flatmap(
        lambda d: st.sampled_from(
            [
                d,
                f"{d}.r1",
                f"{d}.r0",
                f"{d}.r99",
                f"draftgate://drafts/{d}",
                f"draftgate://drafts/{d}/x",
                f"draftgate://drafts/{d}.r1",
                f" {d}",
                d.upper(),
            ]
        )
    )
    return spellings | hostile_text() | st.text(max_size=3000) | json_values


def call(draft_ids: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    params = {
        "resources/read": st.fixed_dictionaries({"uri": draft_ids}),
        "resources/list": st.fixed_dictionaries({}, optional={"cursor": draft_ids}),
        "tasks/get": st.fixed_dictionaries({"taskId": draft_ids}),
        "tasks/cancel": st.fixed_dictionaries({"taskId": draft_ids}),
        "tasks/update": st.fixed_dictionaries(
            {"taskId": draft_ids}, optional={"inputResponses": json_values}
        ),
        "subscriptions/listen": st.fixed_dictionaries(
            {
                "notifications": st.fixed_dictionaries(
                    {},
                    optional={
                        "resourceSubscriptions": st.lists(draft_ids, max_size=3) | json_values,
                        "taskIds": st.lists(draft_ids, max_size=3) | json_values,
                        "toolsListChanged": json_values,
                    },
                )
                | json_values
            }
        ),
    }
    return st.sampled_from([*METHODS, "subscriptions/listen"]).flatmap(
        lambda method: st.tuples(st.just(method), params[method])
    )


def post(url: str, token: str, method: str, params: dict[str, Any], tasks: bool) -> Any:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}} if tasks else {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    with (
        httpx2.Client(timeout=30) as http,
        http.stream("POST", url, content=json.dumps(body), headers=headers) as response,
    ):
        assert response.status_code < 500, (method, params, response.read())
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            for line in response.iter_lines():  # the first frame says it all
                if line.startswith("data:"):
                    return response.status_code, json.loads(line.removeprefix("data:"))
            return response.status_code, None
        raw = response.read()
        try:
            return response.status_code, json.loads(raw or b"null")
        except ValueError:
            raise AssertionError((response.status_code, raw[:300], method, params)) from None


def test_the_draft_methods_answer_every_input_without_an_internal_error(mcp_url, demo, drafts):
    token = demo["tokens"]["agent"]
    seen: set[str] = set()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(call(ids(drafts)), st.booleans())
    def one(method_params: tuple[str, dict[str, Any]], tasks: bool) -> None:
        method, params = method_params
        status, answer = post(mcp_url, token, method, params, tasks)
        seen.add(method)
        if answer is None or (status >= 400 and not isinstance(answer, dict)):
            return
        error = answer.get("error") if isinstance(answer, dict) else None
        if error is not None:
            assert error["code"] != -32603, (method, params, error)
        text = json.dumps(answer)
        # Nothing of the other end user's draft comes back, except an id the caller sent.
        if drafts["other"] not in json.dumps(params):
            assert drafts["other"] not in text, (method, params, answer)

    one()
    assert seen == {*METHODS, "subscriptions/listen"}
