"""Live updates over server-sent events, against a real uvicorn server (a stream is a
response that never ends on its own, which only a real server delivers as it goes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import anyio
import httpx
import pytest

from service.api.app import create_app
from service.api.console.streams import StreamSlots
from service.errors import DomainError
from service.executions import runner
from service.sessions import errors
from tests.service.console.console import page, post_json, propose, same_origin, signed_in
from tests.service.console.test_card import decide_body, draft_data
from tests.support.api_client import served
from tests.support.backends import both_backends
from tests.support.mcp_client import connect


@pytest.fixture
def live(runtime, demo) -> Iterator[httpx.Client]:
    with served(create_app(runtime)) as client:
        yield client


def sse(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event of a stream, as an EventSource would dispatch them."""
    name, data = "message", ""
    for line in response.iter_lines():
        if line == "":
            if data:
                yield name, json.loads(data)
            name, data = "message", ""
        elif line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif line.startswith("retry: "):
            yield "retry", {}


@both_backends
def test_a_draft_proposed_over_mcp_reaches_the_inbox_stream(live, door, demo):
    signed_in(live, demo["tokens"]["approver_alice"])

    with live.stream("GET", "/console/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
        assert next(events)[0] == "retry"  # the stream started: it reports what comes now
        draft = propose(door)
        name, data = next(events)

    assert name == "draft"
    assert data == {"draft_id": draft["draft_id"], "status": "proposed", "type": "proposed"}


def test_a_draft_proposed_by_a_real_mcp_client_reaches_the_stream(live, mcp_url, demo):
    """The agent over streamable HTTP (the MCP server in its own uvicorn), the console in
    another: the only thing they share is the database."""
    signed_in(live, demo["tokens"]["approver_alice"])
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 1_500, "currency": "USD"},
        "reason": "damaged",
    }

    async def propose_over_mcp() -> dict[str, Any]:
        async with connect(mcp_url, demo["tokens"]["agent"]) as agent:
            result = await agent.call_tool("propose_refund", arguments)
        assert not result.is_error, result.content
        return dict(result.structured_content or {})

    with live.stream("GET", "/console/events") as response:
        events = sse(response)
        next(events)
        draft = anyio.run(propose_over_mcp)
        name, data = next(events)

    assert (name, data["draft_id"], data["type"]) == ("draft", draft["draft_id"], "proposed")
    rows = page(live, "/console/").by_id("inbox-rows")
    assert [r.attrs["data-draft-id"] for r in rows.find_all("tr")] == [draft["draft_id"]]


def test_approvals_and_rejections_are_streamed_too(live, door, demo):
    first, second = propose(door, 2_500), propose(door, 3_000, idempotency_key="second")
    csrf = signed_in(live, demo["tokens"]["approver_alice"])
    with live.stream("GET", "/console/events") as response:
        events = sse(response)
        next(events)
        for draft, decision in ((first, {}), (second, {"decision": "reject", "reason": "no"})):
            data = draft_data(page(live, f"/console/drafts/{draft['draft_id']}"))
            from service.approvals.schemas import Decision

            kwargs: dict[str, Any] = (
                {"decision": Decision.REJECT, "reason": "no"} if decision else {}
            )
            body = decide_body(demo, data, "alice", **kwargs)
            path = f"/console/drafts/{draft['draft_id']}/approvals"
            assert post_json(live, path, body, csrf).status_code == 200
        seen = [next(events)[1] for _ in range(3)]

    assert [(e["draft_id"], e["type"]) for e in seen] == [
        (first["draft_id"], "signed"),
        (first["draft_id"], "approved"),
        (second["draft_id"], "rejected"),
    ]


def test_the_stream_ends_when_the_session_does(live, demo):
    csrf = signed_in(live, demo["tokens"]["approver_alice"])
    with live.stream("GET", "/console/events") as response:
        events = sse(response)
        next(events)
        signed_out = live.post(
            "/console/sign-out", data={"csrf_token": csrf}, headers=same_origin(live)
        )
        assert signed_out.status_code == 303
        remaining = list(events)  # the server closes the stream

    assert remaining == [("session", {"status": "ended"})]


def test_a_stream_ends_when_its_session_goes_idle(live, runtime, demo):
    """A stream is not activity: an open inbox tab does not keep a session alive."""
    from tests.service.console.test_sessions import move_back, session_rows

    signed_in(live, demo["tokens"]["approver_alice"])
    with live.stream("GET", "/console/events") as response:
        events = sse(response)
        next(events)
        idle = runtime.settings.console_idle_timeout_seconds
        move_back(runtime, last_seen_at=timedelta(seconds=idle))
        remaining = list(events)

    assert remaining == [("session", {"status": "ended"})]
    [row] = session_rows(runtime)
    assert row.end_reason is not None
    assert row.end_reason.value == "idle"


def test_opening_a_stream_is_not_activity_and_a_bad_last_event_id_is_ignored(
    live, runtime, door, demo
):
    """Neither the stream's request touches the session (F9) nor does a Last-Event-ID that
    is not ASCII digits ("²" passes str.isdigit) break it (F8): it starts from now."""
    from tests.service.console.test_sessions import move_back, session_rows

    signed_in(live, demo["tokens"]["approver_alice"])
    before = move_back(runtime, last_seen_at=timedelta(minutes=5))
    for amount, resume in enumerate((b"\xb2", b"12a", b"9" * 40), start=100):
        with live.stream("GET", "/console/events", headers={"Last-Event-ID": resume}) as response:
            assert response.status_code == 200, response.read()
            events = sse(response)
            assert next(events)[0] == "retry"
            draft = propose(door, amount)  # a new draft each time (the same one is replayed)
            assert next(events)[1]["draft_id"] == draft["draft_id"]  # nothing older replayed

    [row] = session_rows(runtime)
    assert row.last_seen_at == before.last_seen_at


def test_a_session_holds_a_bounded_number_of_streams(live, runtime, demo):
    signed_in(live, demo["tokens"]["approver_alice"])
    limit = runtime.settings.console_streams_per_session
    opened, readers = [], []
    try:
        for _ in range(limit):
            response = live.send(live.build_request("GET", "/console/events"), stream=True)
            opened.append(response)
            # Keep the reader: dropping it would close the response (and free its slot).
            readers.append(sse(response))
            assert next(readers[-1])[0] == "retry"  # started: its slot is held
        refused = live.get("/console/events")
        assert refused.status_code == 409
        assert refused.json()["code"] == "TOO_MANY_STREAMS"
    finally:
        for response in opened:
            response.close()


def test_stream_slots_are_released_however_a_stream_ends():
    slots = StreamSlots()
    with slots.hold("cs_1", 1):
        with pytest.raises(DomainError) as refused, slots.hold("cs_1", 1):
            pass
        assert getattr(refused.value, "code", None) == errors.TOO_MANY_STREAMS.code
        assert slots.held("cs_2") == 0
    assert slots.held("cs_1") == 0
    with pytest.raises(RuntimeError), slots.hold("cs_1", 1):
        raise RuntimeError("the client went away")
    assert slots.held("cs_1") == 0


@both_backends
def test_an_execution_is_followed_until_it_is_finished(live, runtime, door, demo):
    draft = propose(door, 2_500)
    csrf = signed_in(live, demo["tokens"]["approver_alice"])
    data = draft_data(page(live, f"/console/drafts/{draft['draft_id']}"))
    path = f"/console/drafts/{draft['draft_id']}"
    assert post_json(live, f"{path}/approvals", decide_body(demo, data, "alice"), csrf).is_success
    execution_id = post_json(live, f"{path}/execute", None, csrf).json()["execution_id"]

    with live.stream("GET", f"/console/executions/{execution_id}/events") as response:
        events = sse(response)
        assert next(events)[0] == "retry"
        assert next(events) == ("execution", {"status": "queued"})
        # What the worker's task runs, here in the test process (no broker in this test).
        assert runner.run_execution(runtime, execution_id) == runner.RunResult("succeeded")
        rest = list(events)  # ends by itself once finished

    assert rest[-1] == ("execution", {"status": "succeeded"})
    assert live.get(f"/console/executions/{execution_id}").json()["status"] == "succeeded"


def test_streams_refuse_before_they_start_and_the_refusal_is_audited(browser, runtime, demo):
    from sqlmodel import Session, col, select

    from service.audit.models import AuditEvent

    signed_in(browser, demo["tokens"]["approver_alice"])
    unknown = browser.get("/console/executions/exe_" + "0" * 24 + "/events")
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "EXECUTION_UNAVAILABLE"
    browser.cookies.clear()
    signed_in(browser, demo["tokens"]["admin"])
    admin = browser.get("/console/events")
    assert admin.status_code == 403

    with Session(runtime.engine) as session:
        types = set(
            session.exec(select(AuditEvent.type).where(col(AuditEvent.type).like("console.%")))
        )
    assert {"console.execution.events.refused", "console.events.refused"} <= types
