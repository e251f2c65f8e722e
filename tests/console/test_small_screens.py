"""The inbox and the card fit a phone (390 px) and a laptop (1,280 px): the page never
scrolls sideways (issue 20.5), asserted in Chromium with
``document.documentElement.scrollWidth``. With DRAFTGATE_SCREENSHOTS=1 it also writes the
README's screenshots (docs/img/)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import flow_order
from tests.console.helpers import SMALL, open_card, propose_refund, screenshot, sign_in

pytestmark = pytest.mark.full

WIDTHS = {"phone": 390, "laptop": 1280}


def page_width(page: Any) -> tuple[int, int]:
    widths: list[int] = page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    return widths[0], widths[1]


@pytest.mark.parametrize("device", sorted(WIDTHS))
def test_the_inbox_and_the_card_never_scroll_sideways(new_context, stack, device):
    order = flow_order(stack.runtime.engine, "small-screens", sorted(WIDTHS).index(device))
    long_note = "The parcel arrived crushed; " * 12 + "photos attached."
    small = propose_refund(stack, SMALL, note=long_note, order=order)
    propose_refund(stack, SMALL + 100, order=order)  # the world section lists the other one
    page = new_context(viewport={"width": WIDTHS[device], "height": 900}).new_page()
    sign_in(page, stack.demo["tokens"]["approver_alice"])
    page.locator(f'a[href="/console/drafts/{small}"]').wait_for(state="visible")

    scroll, client = page_width(page)
    assert scroll <= client, f"the inbox is {scroll} px wide in a {client} px window"
    if device == "phone":
        # Rows are stacked: each cell under its column's name, the header row hidden.
        assert page.locator("#inbox thead").is_hidden()
        label = page.evaluate(
            "() => getComputedStyle(document.querySelector('#inbox td[data-label]'), "
            "'::before').content"
        )
        assert label == '"Summary"'
    if device == "phone":  # the laptop's are the README's main screenshots already
        screenshot(page, "console-inbox-phone")

    open_card(page, small)
    page.locator("#world").wait_for(state="visible")
    scroll, client = page_width(page)
    assert scroll <= client, f"the card is {scroll} px wide in a {client} px window"
    assert page.locator("#approve").is_visible()
    if device == "phone":
        screenshot(page, "console-card-phone")
