"""Narrowing from the card in Chromium (issue 21.3): the approver types a lower amount, the
browser computes the narrowed params, their digest and the next revision, signs, and the
card shows the narrowed draft approved; a higher amount is refused in words."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import flow_order
from tests.console.helpers import (
    agent_view,
    import_key,
    open_card,
    propose_refund,
    sign_in,
    text_of,
    wait_for_text,
)

pytestmark = pytest.mark.full


def test_an_approver_narrows_a_refund_and_approves_the_lower_amount(new_context, stack):
    order = flow_order(stack.runtime.engine, "narrow", 1)
    draft_id = propose_refund(stack, 6_000, order=order)
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    open_card(page, draft_id)

    page.fill("#narrow-amount", "40.00")
    page.click("#narrow-button")
    page.wait_for_selector('#draft-status[data-status="approved"]')

    assert "revision 2" in text_of(page, "#card-facts")
    assert text_of(page, "#amount").startswith("40.00 USD")
    view = agent_view(stack, draft_id)
    assert (view["status"], view["revision"]) == ("approved", 2)


def test_a_higher_amount_is_refused_in_words(new_context, stack):
    order = flow_order(stack.runtime.engine, "narrow", 2)
    draft_id = propose_refund(stack, 6_000, order=order)
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")
    open_card(page, draft_id)

    page.fill("#narrow-amount", "70.00")
    page.click("#narrow-button")

    refused = wait_for_text(page, "#decision-status", "NARROWING_REFUSED")
    assert "more than the 60.00 USD proposed" in refused
    assert agent_view(stack, draft_id)["revision"] == 1
