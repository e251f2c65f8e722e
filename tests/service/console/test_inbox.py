"""The inbox: what a signed-in person may act on, tenant-scoped, filtered and sorted."""

from __future__ import annotations

import pytest

from mcp_adapter.tools import ToolDoor
from service.db import session_scope
from service.principal import Role
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.service.console.console import page, signed_in
from tests.support.backends import both_backends
from tests.support.core import approve_in_core


def refund(door: ToolDoor, order_id: str, amount_minor: int, currency: str) -> str:
    arguments = {
        "order_id": order_id,
        "amount": {"amount_minor": amount_minor, "currency": currency},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def cancel(door: ToolDoor, order_id: str) -> str:
    arguments = {"order_id": order_id, "reason": "customer_request"}
    return str(door.call("propose_cancel_order", arguments, new_trace_id(), None)["draft_id"])


def listed(browser, query: str = "") -> list[str]:
    rows = page(browser, "/console/" + (f"?{query}" if query else "")).by_id("inbox-rows")
    return [
        row.attrs["data-draft-id"] for row in rows.find_all("tr") if "data-draft-id" in row.attrs
    ]


def risk_column(browser, query: str) -> list[str]:
    rows = page(browser, f"/console/?{query}").by_id("inbox-rows").find_all("tr")
    return [row.find_all("td")[3].text.strip() for row in rows]


@pytest.fixture
def drafts(door: ToolDoor) -> dict[str, str]:
    """Four open drafts of the demo tenant, proposed in this order."""
    return {
        "usd": refund(door, "ORD-1004", 1_000, "USD"),  # 10.00 USD, low risk
        "jpy": refund(door, "ORD-1006", 5_000, "JPY"),  # 5,000 JPY
        "kwd": refund(door, "ORD-1007", 1_500, "KWD"),  # 1.500 KWD
        "cancel": cancel(door, "ORD-1002"),  # no amount, medium risk
    }


def test_the_inbox_lists_the_open_drafts_oldest_first(browser, demo, drafts):
    signed_in(browser, demo["tokens"]["approver_alice"])
    assert listed(browser) == [drafts["usd"], drafts["jpy"], drafts["kwd"], drafts["cancel"]]


def test_sorting_by_amount_risk_expiry_and_age(browser, demo, drafts):
    signed_in(browser, demo["tokens"]["approver_alice"])
    d = drafts

    # Major units with each currency's exponent: none < 1.500 KWD < 10.00 USD < 5,000 JPY.
    assert listed(browser, "sort=amount") == [d["cancel"], d["kwd"], d["usd"], d["jpy"]]
    assert listed(browser, "sort=amount&order=desc") == [d["jpy"], d["usd"], d["kwd"], d["cancel"]]
    rank = {"low": 0, "medium": 1, "high": 2}
    for order in ("asc", "desc"):
        risks = [rank[r] for r in risk_column(browser, f"sort=risk&order={order}")]
        assert risks == sorted(risks, reverse=order == "desc")
        assert len(set(risks)) >= 2  # low refunds and a medium-risk cancellation
    assert listed(browser, "sort=expiry") == [d["usd"], d["jpy"], d["kwd"], d["cancel"]]
    assert listed(browser, "sort=age&order=desc") == [d["cancel"], d["kwd"], d["jpy"], d["usd"]]


def test_filters_by_action_and_status(browser, runtime, demo, drafts):
    approve_in_core(runtime, demo, drafts["usd"], "bob")  # one approver: now approved
    signed_in(browser, demo["tokens"]["approver_alice"])

    assert listed(browser, "action=cancel_order") == [drafts["cancel"]]
    assert listed(browser, "action=refund") == [drafts["jpy"], drafts["kwd"]]
    assert listed(browser, "status=approved") == [drafts["usd"]]
    assert set(listed(browser, "status=open")) == set(drafts.values())


@both_backends
def test_already_signed_and_own_drafts_are_not_in_the_approvers_inbox(browser, runtime, demo, door):
    large = refund(door, "ORD-1004", 60_000, "USD")  # 600.00 USD: two approvers
    small = refund(door, "ORD-1006", 1_000, "JPY")
    with session_scope(runtime.engine) as session:
        bob_as_agent = tokens.issue(
            session,
            tenant="demo",
            subject="bob",
            role=Role.AGENT,
            on_behalf_of="cust-ada",
            actor="operator:test",
        ).token
    bobs = refund(ToolDoor(runtime, stdio_token=bob_as_agent), "ORD-1007", 1_000, "KWD")
    approve_in_core(runtime, demo, large, "alice")  # 1 of 2: still proposed

    signed_in(browser, demo["tokens"]["approver_alice"])
    assert listed(browser) == [small, bobs]  # not the one she signed
    browser.cookies.clear()
    signed_in(browser, demo["tokens"]["approver_bob"])
    assert listed(browser) == [large, small]  # not the one he proposed
    rows = page(browser, "/console/").by_id(f"draft-{large}").find_all("td")
    assert rows[4].text == "1 of 2"


@both_backends
def test_another_tenants_drafts_are_invisible(browser, runtime, demo, door, acme):
    ours = refund(door, "ORD-1004", 1_000, "USD")
    other = acme
    theirs = refund(
        ToolDoor(runtime, stdio_token=other["tokens"]["agent"]), "ORD-1004", 1_000, "USD"
    )

    signed_in(browser, demo["tokens"]["approver_alice"])
    assert listed(browser, "status=open") == [ours]
    response = browser.get(f"/console/drafts/{theirs}")
    assert response.status_code == 404  # the same answer as a draft that does not exist
    browser.cookies.clear()
    signed_in(browser, other["tokens"]["approver_alice"])
    assert listed(browser, "status=open") == [theirs]


def test_an_auditor_sees_every_open_draft_and_no_buttons(browser, runtime, demo, drafts):
    approve_in_core(runtime, demo, drafts["usd"], "alice")
    signed_in(browser, demo["tokens"]["auditor"])

    assert set(listed(browser, "status=open")) == set(drafts.values())
    card = page(browser, f"/console/drafts/{drafts['jpy']}")
    assert card.by_id("approve") is None
    assert card.by_id("decision-status") is not None


def test_the_rows_fragment_is_what_htmx_swaps_in(browser, demo, drafts):
    signed_in(browser, demo["tokens"]["approver_alice"])
    response = browser.get("/console/inbox/rows?sort=amount&order=desc")
    assert response.status_code == 200
    from tests.service.console.dom import parse

    rows = parse(response.text).by_id("inbox-rows")
    assert next(r.attrs["data-draft-id"] for r in rows.find_all("tr")) == drafts["jpy"]


def test_a_bad_filter_is_a_400_page(browser, demo):
    signed_in(browser, demo["tokens"]["approver_alice"])
    assert browser.get("/console/?sort=price").status_code == 400
    assert browser.get("/console/?status=running").status_code == 400
    assert browser.get("/console/?since=yesterday").status_code == 400


def test_admins_have_no_inbox(browser, demo):
    signed_in(browser, demo["tokens"]["admin"])
    inbox = page(browser, "/console/")
    assert "Admins decide no drafts" in inbox.by_id("inbox-note").text
    assert inbox.by_id("inbox-rows") is None
