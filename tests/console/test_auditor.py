"""An auditor in Chromium (issue 20.6): from the inbox to the audit log, the chain's state,
and a draft's whole timeline, including the agent's read before it proposed."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import flow_order
from tests.console.helpers import SMALL, call_tool, propose_refund, sign_in, text_of

pytestmark = pytest.mark.full


def test_an_auditor_finds_a_drafts_timeline_and_the_chains_state(new_context, stack):
    order = flow_order(stack.runtime.engine, "auditor", 1)
    call_tool(stack.mcp_url, stack.demo["tokens"]["agent"], "get_order", {"order_id": order})
    draft_id = propose_refund(stack, SMALL, order=order)
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["auditor"])

    page.click("#nav-audit")
    page.wait_for_url("**/console/audit")
    assert "The chain verifies" in text_of(page, "#chain-state")
    page.fill("#filter-draft", draft_id)
    page.click("#audit-filters button[type=submit]")
    page.locator(f'#events a[href="/console/audit/drafts/{draft_id}"]').first.click()

    page.wait_for_url(f"**/console/audit/drafts/{draft_id}")
    rows = page.locator("#timeline tbody tr")
    how = {
        (rows.nth(i).get_attribute("data-type"), rows.nth(i).get_attribute("data-how"))
        for i in range(rows.count())
    }
    assert ("tool.called", "same agent and end user, nearby") in how  # the read before
    assert ("draft.proposed", "this draft") in how
