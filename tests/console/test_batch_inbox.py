"""Batch approval from the inbox in Chromium (issue 21.2): the approver ticks drafts, reads
each and their total, signs once, and all are approved; a draft the agent revises meanwhile
makes the whole batch refused, that draft named, nothing approved."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import flow_order
from tests.console.helpers import (
    agent_view,
    call_tool,
    import_key,
    propose_refund,
    sign_in,
    wait_for_text,
)

pytestmark = pytest.mark.full


def tick(page: Any, draft_ids: list[str]) -> None:
    page.goto("/console/")
    for draft_id in draft_ids:
        page.check(f'#inbox-rows input.pick[value="{draft_id}"]')


def test_an_approver_signs_three_drafts_at_once(new_context, stack):
    engine = stack.runtime.engine
    draft_ids = [
        propose_refund(stack, 1_500, order=flow_order(engine, "batch", i)) for i in range(3)
    ]
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    tick(page, draft_ids)

    page.click("#batch-review")
    assert wait_for_text(page, "#batch-totals", "USD") == "45.00 USD"
    assert page.locator("#batch-items li").count() == 3
    page.click("#batch-sign")

    assert "signed: 3 drafts, 3 approved" in wait_for_text(page, "#batch-status", "signed:")
    for draft_id in draft_ids:
        assert agent_view(stack, draft_id)["status"] == "approved"


def test_a_draft_revised_before_the_batch_is_signed_refuses_the_whole_batch(new_context, stack):
    engine = stack.runtime.engine
    orders = [flow_order(engine, "batch-revised", i) for i in range(2)]
    draft_ids = [propose_refund(stack, 1_500, order=order) for order in orders]
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    tick(page, draft_ids)
    page.click("#batch-review")
    wait_for_text(page, "#batch-totals", "USD")

    call_tool(  # the agent revises the second while the approver reads
        stack.mcp_url,
        stack.demo["tokens"]["agent"],
        "propose_refund",
        {
            "order_id": orders[1],
            "amount": {"amount_minor": 1_400, "currency": "USD"},
            "reason": "damaged",
            "draft_id": draft_ids[1],
        },
    )
    page.click("#batch-sign")

    refused = wait_for_text(page, "#batch-status", "BATCH_REFUSED")
    assert draft_ids[1] in refused
    assert [agent_view(stack, d)["status"] for d in draft_ids] == ["proposed", "proposed"]
