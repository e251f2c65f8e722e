"""An approver writes a standing grant in Chromium (issue 21.1): reads it in words before
signing, signs it with the key in this browser, sees a refund the agent proposes within it
approved at once with the grant shown on its card, and revokes it."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import flow_order
from service.config import DEMO_POLICIES
from tests.console.helpers import (
    import_key,
    open_card,
    propose_refund,
    sign_in,
    text_of,
    wait_for_text,
)

pytestmark = pytest.mark.full


@pytest.fixture
def settings_overrides(console_origin: str) -> dict[str, Any]:
    return {"api_public_url": console_origin, "policies": DEMO_POLICIES}


def test_an_approver_signs_a_grant_in_words_and_revokes_it(new_context, stack):
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    import_key(page, stack.demo, "alice")

    page.click("#nav-grants")
    page.wait_for_url("**/console/grants")
    page.fill("#grant-max", "20.00")
    page.fill("#grant-cap", "50.00")
    page.fill("#grant-hours", "24")
    page.click("#grant-preview")
    words = wait_for_text(page, "#grant-words", "refund drafts up to 20.00 USD each")
    assert "at most 50.00 USD a day, for 24 h from" in words
    page.click("#grant-sign")
    page.wait_for_selector('#grants tr[data-status="active"]')
    row = page.locator('#grants tr[data-status="active"]')
    grant_id = row.get_attribute("data-grant")
    assert grant_id is not None

    draft_id = propose_refund(stack, 1_500, order=flow_order(stack.runtime.engine, "grants", 1))
    open_card(page, draft_id)
    assert text_of(page, "#draft-status").startswith("approved")
    assert "by standing grant" in text_of(page, f'#approvals tr[data-grant="{grant_id}"]')

    page.goto("/console/grants")
    page.click(f'#grants tr[data-grant="{grant_id}"] button.revoke')
    page.wait_for_selector(f'#grants tr[data-grant="{grant_id}"][data-status="revoked"]')
    assert "revoked by approver:alice" in text_of(page, f'#grants tr[data-grant="{grant_id}"]')


def test_a_refused_grant_is_explained_and_nothing_is_signed(new_context, stack):
    page: Any = new_context().new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    page.goto("/console/grants")
    page.fill("#grant-max", "20.005")  # three decimals: not an amount of USD
    page.click("#grant-preview")
    assert "is not an amount of USD" in wait_for_text(page, "#grant-status", "not an amount")
    page.fill("#grant-max", "20.00")
    page.fill("#grant-hours", "400")  # longer than the policy's 7 days
    page.click("#grant-preview")
    assert "GRANT_NOT_ALLOWED" in wait_for_text(page, "#grant-status", "GRANT_NOT_ALLOWED")
    assert page.locator("#grant-offer").is_hidden()
