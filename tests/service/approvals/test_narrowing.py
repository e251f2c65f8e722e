"""Narrow on approve (issue 21.3, docs/approvals.md "Narrowing"): an approver lowers a
refund's amount instead of rejecting it and approves the narrowed revision in the same step;
it executes the lower amount once, the agent reads the narrowed terms, and anything but a
narrowing is refused with nothing written. Through the real app in-process, on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.schemas import Decision, signed_request, statement_for
from service.canonical import params_sha256
from service.executions import runner
from service.money import Money
from service.registry.base import WriteAction
from service.signing import load_private_key
from service.sql import rfc3339_seconds, utcnow
from service.tracing import new_trace_id
from service.validation import StrictInput
from tests.service.api.test_approvals_api import assert_problem
from tests.service.executions.test_runner import event_types, refunds_for, state
from tests.support.api_client import bearer, get_draft, in_process
from tests.support.backends import both_backends
from tests.support.core import approve_in_core

pytestmark = both_backends

ORDER = "ORD-1004"  # delivered, 785.00 USD, nothing refunded


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def propose(door: ToolDoor, amount_minor: int) -> str:
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def narrowing(
    demo: dict[str, Any], draft: dict[str, Any], params: dict[str, Any], who: str = "alice"
) -> dict[str, Any]:
    """The body an approver sends: the narrowed params and their approval of the next
    revision, signed."""
    key = load_private_key(Path(demo["approvers"][who]["private_key_file"]))
    statement = statement_for(
        {**draft, "revision": draft["revision"] + 1, "params_sha256": params_sha256(params)},
        decision=Decision.APPROVE,
        approver=who,
        key_id=demo["approvers"][who]["key_id"],
        issued_at=rfc3339_seconds(utcnow()),
    )
    return {"params": params, **signed_request(statement, key)}


def lowered(draft: dict[str, Any], amount_minor: int, **other: Any) -> dict[str, Any]:
    return {**draft["params"], "amount": {"amount_minor": amount_minor, "currency": "USD"}, **other}


def token(demo: dict[str, Any], who: str = "alice") -> str:
    return str(demo["tokens"][f"approver_{who}"])


def test_a_60_refund_narrowed_to_40_executes_40_once(api, runtime, demo, door):
    draft_id = propose(door, 6_000)
    draft = get_draft(api, token(demo), draft_id)
    body = narrowing(demo, draft, lowered(draft, 4_000))

    response = api.post(f"/v1/drafts/{draft_id}/narrow", json=body, headers=bearer(token(demo)))

    assert response.status_code == 201, response.text
    narrowed = response.json()
    assert (narrowed["status"], narrowed["revision"]) == ("approved", 2)
    assert narrowed["amount"]["display"] == "40.00 USD"
    assert narrowed["progress"]["approvers"] == ["alice"]
    agent = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert "narrowed it to: Refund 40.00 USD" in agent["message"]
    assert "draft.narrowed" in event_types(runtime, draft_id)

    accepted = api.post(f"/v1/drafts/{draft_id}/execute", headers=bearer(token(demo)))
    execution_id = accepted.json()["execution_id"]
    runner.run_execution(runtime, execution_id)
    runner.run_execution(runtime, execution_id)
    assert state(runtime, execution_id)[0].status == "succeeded"
    [refund] = refunds_for(runtime, f"{draft_id}:2")
    assert refund.amount_minor == 4_000


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda d: lowered(d, 7_000), "is more than the 60.00 USD proposed"),
        (lambda d: lowered(d, 6_000), "nothing was narrowed"),
        (lambda d: lowered(d, 4_000, reason="wrong_item"), "changed: reason"),
        (lambda d: lowered(d, 4_000, order_id="ORD-1001"), "changed: order_id"),
        (
            lambda d: {**d["params"], "amount": {"amount_minor": 4_000, "currency": "EUR"}},
            "the currency must stay USD",
        ),
        (lambda d: lowered(d, 4_000, note="the approver's words"), "changed: note"),
    ],
)
def test_anything_but_a_narrowing_is_refused_and_nothing_is_written(
    api, runtime, demo, door, change, why
):
    draft_id = propose(door, 6_000)
    draft = get_draft(api, token(demo), draft_id)
    body = narrowing(demo, draft, change(draft))

    problem = assert_problem(
        api.post(f"/v1/drafts/{draft_id}/narrow", json=body, headers=bearer(token(demo))),
        400,
        "NARROWING_REFUSED",
    )

    assert why in problem["message"]
    after = get_draft(api, token(demo), draft_id)
    assert (after["status"], after["revision"], after["approvals"]) == ("proposed", 1, [])
    types = event_types(runtime, draft_id)
    assert types[-1] == "narrowing.refused"  # audited, and nothing else was recorded
    assert "draft.narrowed" not in types


def test_a_statement_for_the_current_revision_narrows_nothing(api, runtime, demo, door):
    draft_id = propose(door, 6_000)
    draft = get_draft(api, token(demo), draft_id)
    body = narrowing(demo, {**draft, "revision": draft["revision"] - 1}, lowered(draft, 4_000))
    assert_problem(
        api.post(f"/v1/drafts/{draft_id}/narrow", json=body, headers=bearer(token(demo))),
        409,
        "STALE_REVISION",
    )
    assert get_draft(api, token(demo), draft_id)["revision"] == 1


def test_a_narrowed_draft_that_still_needs_two_waits_for_another_approver(api, runtime, demo, door):
    draft_id = propose(door, 60_000)  # 600.00 USD: two approvers
    draft = get_draft(api, token(demo), draft_id)
    body = narrowing(demo, draft, lowered(draft, 55_000))
    narrowed = api.post(f"/v1/drafts/{draft_id}/narrow", json=body, headers=bearer(token(demo)))
    assert narrowed.status_code == 201, narrowed.text
    assert (narrowed.json()["status"], narrowed.json()["progress"]["received"]) == ("proposed", 1)
    agent = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert agent["message"].startswith("An approver (alice) narrowed it to: Refund 550.00 USD")
    approve_in_core(runtime, demo, draft_id, "bob")
    assert get_draft(api, token(demo), draft_id)["status"] == "approved"


def test_narrowing_under_a_tier_does_not_let_its_author_approve_alone(api, runtime, demo, door):
    draft_id = propose(door, 60_000)  # 600.00 USD: two approvers
    draft = get_draft(api, token(demo), draft_id)
    body = narrowing(demo, draft, lowered(draft, 40_000))  # 400.00: one approver's tier
    narrowed = api.post(f"/v1/drafts/{draft_id}/narrow", json=body, headers=bearer(token(demo)))
    assert narrowed.status_code == 201, narrowed.text
    shown = narrowed.json()
    assert (shown["status"], shown["progress"]["received"], shown["approvals_required"]) == (
        "proposed",
        1,
        2,
    )
    approve_in_core(runtime, demo, draft_id, "bob")
    assert get_draft(api, token(demo), draft_id)["status"] == "approved"


class _Quantity(StrictInput):
    amount: Money
    quantity: int


class _Priced(StrictInput):
    price: Money
    amount: int  # a quantity that happens to be called amount


def _action(model: type[StrictInput], priced: bool = False) -> WriteAction:
    class Probe(WriteAction):
        name = "probe"
        kind = "write"
        contract_version = 1
        title = "probe"
        description = "probe"
        Input = model

        def validate(self, ctx: Any, params: Any) -> Any:
            raise NotImplementedError

        def execute(self, ctx: Any, params: Any, idempotency_key: str) -> Any:
            raise NotImplementedError

        def applied(self, ctx: Any, idempotency_key: str) -> Any:
            return None

    if priced:
        Probe.amount_of = lambda self, params: params.price  # type: ignore[method-assign]
    return Probe()


def test_only_the_amounts_number_may_change_when_narrowing():
    action = _action(_Quantity)
    before = _Quantity(amount=Money(amount_minor=1_000, currency="USD"), quantity=1)
    lower = _Quantity(amount=Money(amount_minor=900, currency="USD"), quantity=1)
    more = _Quantity(amount=Money(amount_minor=900, currency="USD"), quantity=10_000)
    assert action.narrowing_problem(before, lower) is None
    assert "changed: quantity" in str(action.narrowing_problem(before, more))
    assert action.narrowing_problem(before, before) == "nothing was narrowed"


def test_an_action_whose_money_is_elsewhere_cannot_be_narrowed_by_default():
    action = _action(_Priced, priced=True)
    before = _Priced(price=Money(amount_minor=1_000, currency="USD"), amount=1)
    widened = _Priced(price=Money(amount_minor=1_000, currency="USD"), amount=10_000)
    assert "cannot be narrowed" in str(action.narrowing_problem(before, widened))
