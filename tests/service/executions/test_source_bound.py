"""Source-bound approvals (issue 20, DESIGN.md §12): an approval is for the state of the
order the approver saw. Executing it after the order moved is refused SOURCE_CHANGED with
what changed, and the draft comes back at a new revision to approve against the new state.

The worker is played by ``run_execution`` on a real database, on both backends.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update
from sqlmodel import col, select

from mcp_adapter.tools import ToolDoor
from service.db import session_scope
from service.drafts import review
from service.drafts.models import Draft
from service.drafts.schemas import DraftDetail
from service.errors import DomainError
from service.executions import runner
from service.executions.models import Execution
from service.runtime import Runtime
from service.shop.models import Order, Refund
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.service.executions.test_runner import (
    draft_of,
    event_types,
    events,
    propose_refund,
    state,
)
from tests.support.backends import both_backends
from tests.support.core import approve_in_core, decide_in_core, request_execution_in_core

pytestmark = both_backends

ORDER = "ORD-1004"  # delivered 3 days ago, total 785.00 USD, nothing refunded yet


@pytest.fixture
def door(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def detail(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> DraftDetail:
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        return review.get_detail(session, alice, draft_id, runtime=runtime, now=utcnow())


def execute(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> Execution:
    """Request the execution of the draft's current revision and run it as the worker."""
    execution_id = request_execution_in_core(runtime, demo, draft_id)[0].id
    runner.run_execution(runtime, execution_id)
    return state(runtime, execution_id)[0]


def refunds_on(runtime: Runtime, order: str) -> list[Refund]:
    with session_scope(runtime.engine) as session:
        statement = (
            select(Refund)
            .join(Order, col(Order.id) == col(Refund.order_id))
            .where(col(Order.order_number) == order)
        )
        return list(session.exec(statement).all())


def facts(view: DraftDetail) -> dict[str, tuple[str, str | None]]:
    assert view.source is not None
    return {fact.label: (fact.value, fact.now) for fact in view.source.facts}


def test_the_second_of_two_approved_refunds_is_refused_then_re_approved_and_executed_once(
    runtime, demo, door
):
    # 450.00 USD together: within one approver's tier for the order's peers (the demo policy)
    first, second = propose_refund(door, 20_000), propose_refund(door, 25_000)
    proposed = detail(runtime, demo, second)
    assert proposed.source is not None
    assert proposed.source.ref == f"order:{ORDER}"
    assert facts(proposed)["Refundable now"] == ("785.00 USD", None)
    assert [other.draft_id for other in proposed.source.others] == [first]
    assert proposed.source.total is not None
    assert proposed.source.total.display == "450.00 USD"
    assert proposed.source.warning is None  # 450.00 of 785.00: both fit
    approve_in_core(runtime, demo, first)
    approve_in_core(runtime, demo, second)

    assert execute(runtime, demo, first).status.value == "succeeded"
    refused = execute(runtime, demo, second)

    assert refused.status.value == "failed"
    assert refused.error is not None
    assert refused.error["code"] == "SOURCE_CHANGED"
    changed = {
        c["label"]: (c["then"], c["now"]) for c in refused.error["source_changed"]["changes"]
    }
    assert changed["Refunded so far"] == ("0.00 USD", "200.00 USD")
    assert changed["Refundable now"] == ("785.00 USD", "585.00 USD")
    assert "ORD-1004 changed after the approval" in refused.error["message"]
    rebased = draft_of(runtime, second)
    assert (rebased.status.value, rebased.revision) == ("proposed", 2)
    assert "awaits approval again" in (rebased.status_reason or "")
    assert "draft.rebased" in event_types(runtime, second)
    # The approval of revision 1 no longer counts; the card shows the state it is bound to now.
    view = detail(runtime, demo, second)
    assert (view.progress.received, view.progress.required) == (0, 1)
    assert view.source is not None
    assert not view.source.moved
    assert view.source_revision == view.source.current_revision != proposed.source_revision
    assert facts(view)["Refunded so far"] == ("200.00 USD", None)
    assert len(refunds_on(runtime, ORDER)) == 1
    told = door.call("get_draft", {"draft_id": second}, new_trace_id(), None)
    assert told["message"].startswith("ORD-1004 changed after the approval")
    assert told["source_revision"] == view.source_revision

    approve_in_core(runtime, demo, second)  # one action: approve the new revision
    again = execute(runtime, demo, second)

    assert again.status.value == "succeeded"
    assert again.id != refused.id
    assert again.idempotency_key == f"{second}:2"
    assert sorted(r.amount_minor for r in refunds_on(runtime, ORDER)) == [20_000, 25_000]
    assert draft_of(runtime, second).status.value == "succeeded"


def test_a_cancel_approved_before_the_order_shipped_is_refused_after_it_shipped(
    runtime, demo, door
):
    arguments = {"order_id": "ORD-1002", "reason": "customer_request"}
    draft_id = door.call("propose_cancel_order", arguments, new_trace_id(), None)["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    with session_scope(runtime.engine) as session:  # the warehouse ships it meanwhile
        session.exec(
            update(Order)
            .where(col(Order.order_number) == "ORD-1002")
            .values(status="shipped", shipped_at=utcnow())
        )

    refused = execute(runtime, demo, draft_id)

    assert refused.status.value == "failed"
    assert refused.error is not None
    assert refused.error["code"] == "ORDER_NOT_CANCELLABLE"
    changed = refused.error["source_changed"]["changes"]
    assert {"label": "Status", "then": "paid", "now": "shipped"} in changed
    draft = draft_of(runtime, draft_id)
    assert draft.status.value == "failed"
    assert draft.status_reason is not None
    assert draft.status_reason.startswith("ORD-1002 changed after the approval (status)")
    assert "shipped" in draft.status_reason
    with session_scope(runtime.engine) as session:
        order = session.exec(select(Order).where(col(Order.order_number) == "ORD-1002")).one()
        assert order.status == "shipped"
        assert order.cancelled_at is None


def test_approvers_are_warned_when_pending_refunds_add_up_to_more_than_is_refundable(
    runtime, demo, door
):
    first, second = propose_refund(door, 50_000), propose_refund(door, 40_000)

    view = detail(runtime, demo, second)

    assert view.source is not None
    assert view.source.warning is not None
    assert "900.00 USD" in view.source.warning
    assert "785.00 USD" in view.source.warning
    assert [other.draft_id for other in view.source.others] == [first]


def test_an_approval_must_bind_the_source_revision_the_approver_saw(runtime, demo, door):
    draft_id = propose_refund(door, 2_500)
    shown = detail(runtime, demo, draft_id)
    assert shown.source_revision is not None
    assert shown.statement_to_sign is not None
    assert shown.statement_to_sign["source_revision"] == shown.source_revision

    for wrong in (None, "0" * 32):
        with pytest.raises(DomainError) as refused:
            approve_with_source(runtime, demo, draft_id, wrong)
        assert refused.value.code == "STATEMENT_MISMATCH"
        assert "source_revision" in refused.value.message
    approve_with_source(runtime, demo, draft_id, shown.source_revision)
    assert draft_of(runtime, draft_id).status.value == "approved"


def approve_with_source(
    runtime: Runtime, demo: dict[str, Any], draft_id: str, source_revision: str | None
) -> None:
    """Alice's approval, signed over ``source_revision`` (None: the member left out)."""
    decide_in_core(runtime, demo, draft_id, "alice", shown={"source_revision": source_revision})


def test_a_revision_proposed_again_after_the_order_moved_is_a_new_revision(runtime, demo, door):
    draft_id = propose_refund(door, 2_500)
    before = draft_of(runtime, draft_id).source_revision
    propose_refund(door, 1_000)  # another draft; not yet a change of the order
    with session_scope(runtime.engine) as session:
        session.exec(
            update(Order)
            .where(col(Order.order_number) == ORDER)
            .values(shipping_address={**_address(session), "city": "Elsewhere"})
        )
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
        "draft_id": draft_id,
    }
    revised = door.call("propose_refund", arguments, new_trace_id(), None)

    assert revised["revision"] == 2
    assert revised["replayed"] is False
    assert draft_of(runtime, draft_id).source_revision != before
    assert events(runtime, draft_id, "draft.revised")


def _address(session: Any) -> dict[str, Any]:
    order = session.exec(select(Order).where(col(Order.order_number) == ORDER)).one()
    return dict(order.shipping_address)


def test_padding_an_order_with_small_drafts_cannot_hide_a_large_one_from_the_total(
    runtime, demo, door
):
    for cents in range(1, 52):  # more than the card lists
        propose_refund(door, cents)
    first, second = propose_refund(door, 50_000), propose_refund(door, 40_000)

    view = detail(runtime, demo, second)

    assert view.source is not None
    assert view.source.others_count == 52 > len(view.source.others)
    assert first not in {other.draft_id for other in view.source.others}
    assert view.source.warning is not None
    assert "more than the 785.00 USD" in view.source.warning


def test_a_retry_that_finds_the_order_moved_fails_closed_without_a_rebase(runtime, demo, door):
    draft_id = propose_refund(door, 2_500)
    approve_in_core(runtime, demo, draft_id)
    execution_id = request_execution_in_core(runtime, demo, draft_id)[0].id
    with session_scope(runtime.engine) as session:
        # As if a first attempt failed after reaching the payment provider: queued again.
        session.exec(update(Execution).where(col(Execution.id) == execution_id).values(attempts=1))
        session.exec(
            update(Order)
            .where(col(Order.order_number) == ORDER)
            .values(shipping_address={**_address(session), "city": "Elsewhere"})
        )

    assert runner.run_execution(runtime, execution_id) == runner.RunResult("failed")

    failed = state(runtime, execution_id)[0]
    assert failed.error is not None
    assert failed.error["code"] == "SOURCE_CHANGED"
    assert "not rebased" in failed.error["message"]
    draft = draft_of(runtime, draft_id)
    assert (draft.status.value, draft.revision) == ("failed", 1)
    assert refunds_on(runtime, ORDER) == []


def test_a_draft_whose_source_revision_was_cleared_is_refused_by_the_worker(runtime, demo, door):
    draft_id = propose_refund(door, 2_500)
    with session_scope(runtime.engine) as session:  # a database writer unbinds it
        session.exec(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(source_revision=None, source_ref=None, source=None)
        )
    approve_with_source(runtime, demo, draft_id, None)  # accepted: the row says no source

    refused = execute(runtime, demo, draft_id)

    assert refused.status.value == "failed"
    assert refused.error is not None
    assert refused.error["code"] == "APPROVALS_UNVERIFIED"
    assert "names no source revision" in refused.error["message"]
    assert refunds_on(runtime, ORDER) == []
