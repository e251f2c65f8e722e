"""The CLI prints the approval progress the API answers, which is the execute gate's count.

BUG (progress-drift, CLI): ``draftgate approve`` counted the approvals marked as counting
itself and printed them against the number required as the draft stored it at proposal, so
after the operator tightened the policy it printed "draft is proposed (1 of 1 approvals)"
while the gate required 2; ``drafts list`` printed "1/1". Now both print the API's answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_adapter.tools import ToolDoor
from service.policies.schemas import PolicyConfig
from service.tracing import new_trace_id
from tests.support import cli


def run_as(served: cli.Served, who: str, *args: str) -> Any:
    env = {"DRAFTGATE_API_URL": served.url, "DRAFTGATE_TOKEN": served.demo["tokens"][who]}
    result = cli.run(*args, env=env)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_approve_list_and_show_print_the_gates_count_after_the_policy_tightened(
    served: cli.Served, monkeypatch: pytest.MonkeyPatch
):
    door = ToolDoor(served.runtime, stdio_token=served.demo["tokens"]["agent"])
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 10_000, "currency": "USD"},
        "reason": "damaged",
    }
    draft_id = door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"]
    two = PolicyConfig.model_validate({"tiers": {"USD": [{"approvals": 2}]}})
    monkeypatch.setitem(served.runtime.policies, "refund", two)  # after it was proposed

    key = served.demo["approvers"]["alice"]["private_key_file"]
    approved = run_as(served, "approver_alice", "approve", draft_id, "--key", key, "--yes")
    listed = run_as(served, "approver_bob", "drafts", "list")
    shown = run_as(served, "approver_bob", "drafts", "show", draft_id)

    assert "approved revision 1: draft is proposed (1 of 2 approvals)" in approved
    [row] = [line for line in listed.splitlines() if draft_id in line]
    assert " 1/2 " in row
    assert "approvals: 1 of 2 approvals; counted: alice" in shown
