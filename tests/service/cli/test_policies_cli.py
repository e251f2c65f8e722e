"""``draftgate policies simulate`` (issue 21.5, shadow mode): the drafts of the last days
judged under a proposed policy file beside the configured one, on the real database, with
nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlmodel import select

from mcp_adapter.tools import ToolDoor
from service.db import session_scope
from service.drafts.models import Draft
from service.tracing import new_trace_id
from tests.support.backends import both_backends
from tests.support.cli import operator_env, run

STRICTER = {
    "refund": {
        "tiers": {"USD": [{"up_to": "10.00", "approvals": 1}, {"approvals": 2}]},
        "cumulative": {"by": "order_id", "window_seconds": 86_400},
    }
}


def refund(runtime: Any, demo: dict[str, Any], order: str, amount_minor: int) -> str:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def policy_file(tmp_path: Path, policies: Any) -> Path:
    path = tmp_path / "policies.json"
    path.write_text(json.dumps(policies), encoding="utf-8")
    return path


def drafts_in(runtime: Any) -> list[tuple[str, int, int]]:
    with session_scope(runtime.engine) as session:
        rows = session.exec(select(Draft)).all()
        return sorted((d.id, d.revision, d.approvals_required) for d in rows)


@both_backends
def test_a_stricter_policy_is_judged_against_recent_drafts_and_nothing_is_written(
    runtime, demo, tmp_path
):
    larger = refund(runtime, demo, "ORD-1004", 2_500)  # 25.00: one approver today, two then
    smaller = refund(runtime, demo, "ORD-1003", 1_000)  # 10.00: one either way
    before = drafts_in(runtime)
    path = policy_file(tmp_path, STRICTER)

    result = run("policies", "simulate", "--file", str(path), env=operator_env(runtime))

    assert result.exit_code == 0, result.stderr
    assert "2 drafts in the last 30 days: 1 would need more approvals, 0 fewer, 1 the same" in (
        result.stdout
    )
    assert larger in result.stdout
    assert smaller not in result.stdout
    as_json = run("policies", "simulate", "--file", str(path), "--json", env=operator_env(runtime))
    report = json.loads(as_json.stdout)
    assert (report["drafts"], report["more"], report["same"]) == (2, 1, 1)
    [changed] = report["changed"]
    assert (changed["draft_id"], changed["now"], changed["proposed"]) == (larger, 1, 2)
    assert changed["rule"] == "above every lower tier: 2 distinct approvers"
    assert drafts_in(runtime) == before


def test_a_policy_that_adds_up_by_another_parameter_is_noted(runtime, demo, tmp_path):
    refund(runtime, demo, "ORD-1004", 2_500)
    by_reason = {
        "refund": {**STRICTER["refund"], "cumulative": {"by": "reason", "window_seconds": 600}}
    }

    result = run(
        "policies",
        "simulate",
        "--file",
        str(policy_file(tmp_path, by_reason)),
        env=operator_env(runtime),
    )

    assert result.exit_code == 0, result.stderr
    assert "note: refund: the proposed policy adds amounts up by 'reason'" in result.stdout


def test_a_file_that_is_no_policy_is_refused_with_exit_2(runtime, tmp_path):
    for content, problem in (
        ("{not json", "Expecting property name"),
        ('["refund"]', "one JSON object"),
        ('{"refund": {"tiers": []}}', "policy 'refund'"),
    ):
        path = tmp_path / "bad.json"
        path.write_text(content, encoding="utf-8")
        result = run("policies", "simulate", "--file", str(path), env=operator_env(runtime))
        assert result.exit_code == 2, (content, result.stdout)
        assert problem in result.stderr, (content, result.stderr)
