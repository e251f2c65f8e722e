"""The card keeps up in Chromium (issue 20.3): after approve, execute, or a change made
elsewhere, its facts, the world it changes, its decisions and its buttons update without a
reload; a failed execution shows its reason at once.

The agent proposes over MCP, the browser signs with an imported key, a Celery worker process
executes. Each test refunds an order of its own (harness.orders), so none sees another's.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col

from harness.approvals import approve, bearer
from harness.orders import flow_order
from service.db import session_scope
from service.shop.models import Order
from tests.console.helpers import (
    SMALL,
    import_key,
    open_card,
    propose_refund,
    sign_in,
    text_of,
    wait_for_text,
)

pytestmark = pytest.mark.full


def alice_on_card(new_context: Any, stack: Any, draft_id: str) -> Any:
    page = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    open_card(page, draft_id)
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
    return page


def test_approve_then_execute_update_the_card_without_a_reload(new_context, stack):
    order = flow_order(stack.runtime.engine, "live-card", 1)
    draft_id = propose_refund(stack, SMALL, order=order)
    page = alice_on_card(new_context, stack, draft_id)
    assert "0 of 1" in text_of(page, "#approvals-progress")
    assert "No decisions yet" in text_of(page, "#decisions")
    assert page.locator("#execute").is_hidden()

    page.click("#approve")

    wait_for_text(page, "#approvals-progress", "1 of 1")
    wait_for_text(page, "#draft-status", "approved")
    assert "alice" in text_of(page, "#approvals")
    assert "0 of 1" not in text_of(page, "#policy")
    page.locator("#execute").wait_for(state="visible")
    assert page.locator("#approve").is_hidden()

    page.click("#execute")

    wait_for_text(page, "#execution-status", "succeeded")
    wait_for_text(page, "#draft-status", "succeeded")
    page.locator("#execute").wait_for(state="hidden")
    assert "Refunded so far" in text_of(page, "#source-facts")
    assert page.evaluate("window.__sameDocument") is True


def test_a_failed_execution_shows_its_reason_at_once(new_context, stack):
    order = flow_order(stack.runtime.engine, "live-card", 2)
    draft_id = propose_refund(stack, SMALL, order=order)
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    page = alice_on_card(new_context, stack, draft_id)
    with session_scope(stack.runtime.engine) as session:  # the order is cancelled meanwhile
        session.exec(
            update(Order).where(col(Order.order_number) == order).values(status="cancelled")
        )

    page.click("#execute")

    status = wait_for_text(page, "#execution-status", "failed")
    assert "ORDER_NOT_REFUNDABLE" in status
    assert "changed after the approval" in text_of(page, "#draft-status")
    assert page.evaluate("window.__sameDocument") is True


def test_a_decision_made_elsewhere_reaches_an_open_card(new_context, stack):
    order = flow_order(stack.runtime.engine, "live-card", 3)
    draft_id = propose_refund(stack, SMALL, order=order)
    page = alice_on_card(new_context, stack, draft_id)

    # Bob approves from the API (his CLI, another browser): Alice's card follows.
    assert approve(stack.api_url, stack.demo, draft_id, "bob").status_code == 201

    wait_for_text(page, "#approvals-progress", "1 of 1")
    assert "bob" in text_of(page, "#approvals")
    page.locator("#execute").wait_for(state="visible")
    assert page.evaluate("window.__sameDocument") is True
    answer = httpx.get(
        f"{stack.api_url}/v1/drafts/{draft_id}",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=30,
    )
    assert answer.json()["status"] == "approved"
