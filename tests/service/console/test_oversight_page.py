"""The auditor's oversight page (issue 21.4): each approver's decisions, dwell, hasty
decisions and flags, each action's decision latency; auditors only."""

from __future__ import annotations

from typing import Any

import pytest

from harness.orders import Orders
from service.config import DEFAULT_POLICIES
from tests.service.console.console import page, signed_in
from tests.service.executions.test_runner import propose_refund
from tests.support.core import approve_in_core


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    watch = {"min_dwell_seconds": 5, "flag_after": 5, "window_seconds": 600}
    return {
        "policies": {
            **DEFAULT_POLICIES,
            "refund": {**DEFAULT_POLICIES["refund"], "oversight": watch},
        }
    }


def test_an_auditor_reads_each_approvers_care_and_their_flags(browser, runtime, demo, door):
    for order in Orders(runtime.engine, prefix=4).take(5):  # five hasty approvals: one flag
        approve_in_core(runtime, demo, propose_refund(door, 1_000, order))
    signed_in(browser, demo["tokens"]["auditor"])

    shown = page(browser, "/console/oversight")

    [alice] = [
        row.attrs
        for row in shown.by_id("oversight-approvers").find_all("tr")
        if row.attrs.get("data-approver") == "alice"
    ]
    assert (alice["data-hasty"], alice["data-flags"]) == ("5", "1")
    actions = [r.attrs.get("data-action") for r in shown.by_id("oversight-actions").find_all("tr")]
    assert "refund" in actions
    assert page(browser, "/console/").by_id("nav-oversight").attrs["href"] == "/console/oversight"
    browser.cookies.clear()
    signed_in(browser, demo["tokens"]["approver_bob"])
    assert browser.get("/console/oversight").status_code == 403
