"""Batch approval (issue 21.2, docs/approvals.md "Batch approval"): an approver reads
several drafts and their totals, signs once, and each draft counts that approval; if any
item no longer holds when the batch arrives, nothing of it counts and each failing item is
named. Through the real app in-process, the worker's code run in-process, on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import col, select

from harness.orders import Orders
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.models import Approval
from service.approvals.schemas import signed_request
from service.audit.models import AuditEvent
from service.db import session_scope
from service.executions import runner
from service.signing import load_private_key
from service.tracing import new_trace_id
from tests.service.api.test_approvals_api import assert_problem
from tests.service.executions.test_runner import refunds_for, state
from tests.support.api_client import bearer, in_process
from tests.support.backends import both_backends

pytestmark = both_backends


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def refunds(door: ToolDoor, orders: list[str], amount_minor: int = 1_500) -> list[str]:
    return [
        door.call(
            "propose_refund",
            {
                "order_id": order,
                "amount": {"amount_minor": amount_minor, "currency": "USD"},
                "reason": "damaged",
            },
            new_trace_id(),
            None,
        )["draft_id"]
        for order in orders
    ]


def alice(demo: dict[str, Any]) -> dict[str, str]:
    return bearer(demo["tokens"]["approver_alice"])


def offered(api: httpx.Client, demo: dict[str, Any], draft_ids: list[str]) -> dict[str, Any]:
    response = api.post(
        "/v1/approvals/batch/statement", json={"draft_ids": draft_ids}, headers=alice(demo)
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def signed(demo: dict[str, Any], statement: dict[str, Any]) -> dict[str, Any]:
    key = load_private_key(Path(demo["approvers"]["alice"]["private_key_file"]))
    return signed_request(statement, key)


def approvals(runtime, draft_ids: list[str]) -> list[Approval]:
    with session_scope(runtime.engine) as session:
        statement = select(Approval).where(col(Approval.draft_id).in_(draft_ids))
        return list(session.exec(statement).all())


def refused_events(runtime) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == "approvals.batch.refused")
        return list(session.exec(statement).all())


def test_three_drafts_sign_once_and_each_executes_exactly_once(api, runtime, demo, door):
    draft_ids = refunds(door, Orders(runtime.engine, prefix=5).take(3))
    offer = offered(api, demo, draft_ids)
    assert [item["draft_id"] for item in offer["items"]] == draft_ids
    assert [t["display"] for t in offer["totals"]] == ["45.00 USD"]
    assert offer["statement"]["totals"] == [{"currency": "USD", "amount_minor": 4_500}]

    response = api.post(
        "/v1/approvals/batch", json=signed(demo, offer["statement"]), headers=alice(demo)
    )

    assert response.status_code == 201, response.text
    result = response.json()
    assert [d["status"] for d in result["drafts"]] == ["approved"] * 3
    stored = approvals(runtime, draft_ids)
    assert len(stored) == 3
    assert {a.signature for a in stored} == {stored[0].signature}  # one signature for all
    for draft_id in draft_ids:
        accepted = api.post(f"/v1/drafts/{draft_id}/execute", headers=alice(demo))
        assert accepted.status_code == 202, accepted.text
        execution_id = accepted.json()["execution_id"]
        runner.run_execution(runtime, execution_id)
        runner.run_execution(runtime, execution_id)  # a redelivery changes nothing
        assert state(runtime, execution_id)[0].status == "succeeded"
        assert len(refunds_for(runtime, f"{draft_id}:1")) == 1


def test_a_batch_with_one_revised_draft_is_refused_whole_naming_that_item(api, runtime, demo, door):
    orders = Orders(runtime.engine, prefix=6).take(3)
    draft_ids = refunds(door, orders)
    body = signed(demo, offered(api, demo, draft_ids)["statement"])
    door.call(  # the agent revises the second before the batch arrives
        "propose_refund",
        {
            "order_id": orders[1],
            "amount": {"amount_minor": 1_400, "currency": "USD"},
            "reason": "damaged",
            "draft_id": draft_ids[1],
        },
        new_trace_id(),
        None,
    )

    problem = assert_problem(
        api.post("/v1/approvals/batch", json=body, headers=alice(demo)), 409, "BATCH_REFUSED"
    )

    assert [(i["draft_id"], i["code"]) for i in problem["details"]["items"]] == [
        (draft_ids[1], "STALE_REVISION")
    ]
    assert draft_ids[1] in problem["message"]
    assert approvals(runtime, draft_ids) == []
    [event] = refused_events(runtime)
    assert event.data["error"]["code"] == "BATCH_REFUSED"


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        (lambda s: {**s, "totals": [{"currency": "USD", "amount_minor": 1}]}, 409, "BATCH_REFUSED"),
        (lambda s: {**s, "items": s["items"] * 2}, 400, "INVALID_ARGUMENT"),  # a draft twice
        (lambda s: {**s, "approver": "bob"}, 403, "APPROVER_MISMATCH"),
        (lambda s: {**s, "issued_at": "2020-01-01T00:00:00Z"}, 409, "STATEMENT_STALE"),
        (lambda s: {**s, "type": "draftgate.approval.v1"}, 400, "INVALID_ARGUMENT"),
    ],
)
def test_a_batch_that_is_not_what_was_offered_is_refused_and_nothing_counts(
    api, runtime, demo, door, change, status, code
):
    draft_ids = refunds(door, Orders(runtime.engine, prefix=7).take(2))
    statement = change(offered(api, demo, draft_ids)["statement"])
    assert_problem(
        api.post("/v1/approvals/batch", json=signed(demo, statement), headers=alice(demo)),
        status,
        code,
    )
    assert approvals(runtime, draft_ids) == []
    assert [e.data["error"]["code"] for e in refused_events(runtime)] == [code]


def test_a_batch_replayed_or_naming_a_missing_draft_is_refused(api, runtime, demo, door):
    draft_ids = refunds(door, Orders(runtime.engine, prefix=8).take(2))
    body = signed(demo, offered(api, demo, draft_ids)["statement"])
    assert api.post("/v1/approvals/batch", json=body, headers=alice(demo)).status_code == 201
    replayed = assert_problem(
        api.post("/v1/approvals/batch", json=body, headers=alice(demo)), 409, "BATCH_REFUSED"
    )
    assert {i["code"] for i in replayed["details"]["items"]} == {"DRAFT_NOT_OPEN"}
    assert len(approvals(runtime, draft_ids)) == 2

    fresh = refunds(door, Orders(runtime.engine, prefix=9).take(1))
    statement = offered(api, demo, fresh)["statement"]
    missing = {**statement["items"][0], "draft_id": "dft_" + "0" * 32}
    statement = {**statement, "items": [*statement["items"], missing]}
    problem = assert_problem(
        api.post("/v1/approvals/batch", json=signed(demo, statement), headers=alice(demo)),
        409,
        "BATCH_REFUSED",
    )
    assert [i["code"] for i in problem["details"]["items"]] == ["DRAFT_UNAVAILABLE"]
    assert approvals(runtime, fresh) == []


def test_a_batch_approval_row_copied_to_another_draft_never_counts(api, runtime, demo, door):
    batched, other = refunds(door, Orders(runtime.engine, prefix=4).take(2))
    body = signed(demo, offered(api, demo, [batched])["statement"])
    assert api.post("/v1/approvals/batch", json=body, headers=alice(demo)).status_code == 201
    [row] = approvals(runtime, [batched])
    with session_scope(runtime.engine) as session:  # database write access
        copy = Approval(**{**row.model_dump(), "id": "apv_" + "1" * 24, "draft_id": other})
        session.add(copy)
    shown = api.get(f"/v1/drafts/{other}", headers=alice(demo)).json()
    assert shown["status"] == "proposed"
    [verdict] = shown["approvals"]
    assert verdict["counts"] is False
    assert "does not approve the draft exactly once" in verdict["problem"]
