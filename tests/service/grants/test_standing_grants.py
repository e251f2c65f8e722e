"""Standing grants (issue 21.1, docs/approvals.md "Standing grants"): an approver signs once
"refunds up to 20.00 USD each, at most 50.00 USD a day, for 24 h", and each draft within it
counts that approver's approval at its proposal. Everything else is a signed approval's
rule: the grant's signature and terms are re-checked by every count, the worker's
included; revoking the grant or its key stops it at once; quorum and maker ≠ checker hold.

The worker is played by ``run_execution`` on a real database, on both backends.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from harness.orders import Orders
from mcp_adapter.tools import ToolDoor
from service.approvals import progress
from service.config import DEFAULT_POLICIES
from service.db import session_scope
from service.drafts import review, simulation
from service.drafts.models import Draft, DraftStatus
from service.drafts.schemas import DraftDetail
from service.errors import DomainError
from service.executions import runner
from service.grants import actions as grants
from service.grants import proof
from service.grants.models import GrantUse
from service.keys import admin as keys
from service.runtime import Runtime
from service.sql import rfc3339_seconds, utcnow
from service.tokens import actions as tokens
from service.toolcalls import actions as toolcalls
from tests.service.executions.test_runner import event_types, events, propose_refund, state
from tests.support.backends import both_backends
from tests.support.core import (
    approve_in_core,
    grant_in_core,
    reject_in_core,
    request_execution_in_core,
)

pytestmark = both_backends

SMALL = {"currency": "USD", "max_amount_minor": 2_000, "cap_minor": 5_000}
A_DAY = {"cap_window_seconds": 86_400}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    refund = {**DEFAULT_POLICIES["refund"], "grants": {"max_seconds": 7 * 86_400}}
    return {"policies": {**DEFAULT_POLICIES, "refund": refund}}


@pytest.fixture
def door(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def orders(runtime: Runtime, demo: dict[str, Any]) -> Orders:
    return Orders(runtime.engine, prefix=7)


def detail(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> DraftDetail:
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        return review.get_detail(session, alice, draft_id, runtime=runtime, now=utcnow())


def refund(door: ToolDoor, orders: Orders, amount_minor: int) -> str:
    """A refund of ``amount_minor`` cents on an order of its own (100.00 USD, delivered)."""
    return propose_refund(door, amount_minor, orders.take(1)[0])


def revoke(runtime: Runtime, demo: dict[str, Any], grant_id: str, who: str = "alice") -> None:
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"][f"approver_{who}"])
        grants.revoke(session, principal, grant_id, now=utcnow())


def run(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> Any:
    execution_id = request_execution_in_core(runtime, demo, draft_id)[0].id
    runner.run_execution(runtime, execution_id)
    return state(runtime, execution_id)[0]


def test_a_grant_approves_what_fits_it_at_proposal_and_nothing_else(runtime, demo, door, orders):
    grant = grant_in_core(runtime, demo, **SMALL, **A_DAY)
    covered = refund(door, orders, 1_500)
    view = detail(runtime, demo, covered)
    assert view.status is DraftStatus.APPROVED
    assert view.progress.received == view.progress.required == 1
    [approval] = view.approvals
    assert (approval.grant_id, approval.approver, approval.counts) == (grant, "alice", True)
    [granted] = events(runtime, covered, "approval.granted")
    assert granted["data"]["grant_id"] == grant
    assert granted["actor"] == f"grant:{grant}"
    types = event_types(runtime, covered)
    assert types.index("draft.proposed") < types.index("approval.granted")
    assert types.index("approval.granted") < types.index("draft.approved")

    too_big = refund(door, orders, 2_500)
    assert detail(runtime, demo, too_big).status is DraftStatus.PROPOSED
    assert detail(runtime, demo, too_big).approvals == []

    second, third = refund(door, orders, 1_500), refund(door, orders, 1_500)  # 45.00 in all
    assert detail(runtime, demo, third).status is DraftStatus.APPROVED
    fourth = refund(door, orders, 1_500)  # 60.00 would pass the 50.00 a day
    assert detail(runtime, demo, fourth).status is DraftStatus.PROPOSED
    assert {second, third} <= {u.draft_id for u in uses(runtime)}
    assert fourth not in {u.draft_id for u in uses(runtime)}

    execution = run(runtime, demo, covered)  # the worker counts the grant again: it holds
    assert execution.status == "succeeded"


def uses(runtime: Runtime) -> list[GrantUse]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(GrantUse).order_by(col(GrantUse.created_at))).all())


def test_revoking_the_grant_stops_it_at_once_and_the_worker_refuses_what_it_covered(
    runtime, demo, door, orders
):
    grant = grant_in_core(runtime, demo, **SMALL, **A_DAY)
    covered = refund(door, orders, 1_000)
    execution_id = request_execution_in_core(runtime, demo, covered)[0].id  # queued, not run
    revoke(runtime, demo, grant)
    assert detail(runtime, demo, refund(door, orders, 1_000)).status is DraftStatus.PROPOSED
    runner.run_execution(runtime, execution_id)
    execution = state(runtime, execution_id)[0]
    assert execution.status == "failed"
    assert execution.error["code"] == "APPROVALS_UNVERIFIED"
    assert "the grant was revoked" in str(execution.error)
    [shown] = detail(runtime, demo, covered).approvals
    assert (shown.counts, shown.problem) == (False, "the grant was revoked")


def test_revoking_the_grants_key_stops_it_too(runtime, demo, door, orders):
    grant_in_core(runtime, demo, **SMALL, **A_DAY)
    covered = refund(door, orders, 1_000)
    execution_id = request_execution_in_core(runtime, demo, covered)[0].id
    with session_scope(runtime.engine) as session:
        admin = tokens.authenticate(session, demo["tokens"]["admin"])
        keys.revoke_key(session, admin, key_id=demo["approvers"]["alice"]["key_id"])
    assert detail(runtime, demo, refund(door, orders, 1_000)).status is DraftStatus.PROPOSED
    runner.run_execution(runtime, execution_id)
    execution = state(runtime, execution_id)[0]
    assert (execution.status, execution.error["code"]) == ("failed", "APPROVAL_KEY_REVOKED")


def test_a_grant_counts_as_one_approver_and_never_for_the_same_one_twice(
    runtime, demo, door, orders
):
    # 550.00 USD needs two approvers (the demo policy); the grant is alice's one approval
    grant_in_core(runtime, demo, currency="USD", max_amount_minor=60_000)
    draft = propose_refund(door, 55_000)  # ORD-1004: 785.00 USD, delivered
    view = detail(runtime, demo, draft)
    assert (view.status, view.progress.received, view.progress.required) == (
        DraftStatus.PROPOSED,
        1,
        2,
    )
    with pytest.raises(DomainError) as refused:
        approve_in_core(runtime, demo, draft, "alice")
    assert refused.value.code == "ALREADY_SIGNED"
    approve_in_core(runtime, demo, draft, "bob")
    assert detail(runtime, demo, draft).status is DraftStatus.APPROVED


def test_an_action_the_policy_does_not_grant_and_a_grant_too_long_are_refused(runtime, demo):
    with pytest.raises(DomainError) as refused:
        grant_in_core(runtime, demo, action="cancel_order")
    assert refused.value.code == "GRANT_NOT_ALLOWED"
    with pytest.raises(DomainError) as refused:
        grant_in_core(runtime, demo, **SMALL, **A_DAY, duration_seconds=8 * 86_400)
    assert refused.value.code == "GRANT_NOT_ALLOWED"
    assert "7 d" in refused.value.message


# --- found by an attack review ------------------------------------------------------------


def test_a_proposal_whose_clock_is_behind_still_counts_every_earlier_use(
    runtime, demo, door, orders, monkeypatch
):
    # max_uses 1: a proposal whose clock was read before another one committed (or a host
    # whose clock is behind) must not rank its use before the other and slip under the cap
    grant_in_core(
        runtime, demo, currency="USD", max_amount_minor=2_000, max_uses=1, not_before=ago(120)
    )
    first = refund(door, orders, 1_000)
    assert run(runtime, demo, first).status == "succeeded"
    real = toolcalls.utcnow
    monkeypatch.setattr(toolcalls, "utcnow", lambda: real() - timedelta(seconds=5))
    second = refund(door, orders, 1_000)
    monkeypatch.setattr(toolcalls, "utcnow", real)
    assert detail(runtime, demo, second).status is DraftStatus.PROPOSED
    assert [(u.seq, u.draft_id) for u in uses(runtime)] == [(1, first)]


def test_the_worker_refuses_a_draft_whose_source_column_names_another_record(
    runtime, demo, door, orders
):
    # a grant scoped to order A; a draft on order B whose source column was edited to A
    # (someone with database write access) is not run on B
    order_a, order_b = orders.take(2)
    draft_id = propose_refund(door, 1_000, order_b)
    grant_in_core(
        runtime, demo, currency="USD", max_amount_minor=2_000, source_ref=f"order:{order_a}"
    )
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        draft.source_ref = f"order:{order_a}"
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        rules = progress.Rules.of(runtime)
        draft, covered = grants.cover(session, rules, draft, now=utcnow(), trace_id=None)
        assert covered  # what the edited column lets the grant cover
    execution = run(runtime, demo, draft_id)
    assert (execution.status, execution.error["code"]) == ("failed", "APPROVALS_UNVERIFIED")
    assert f"The params change order:{order_b}" in execution.error["message"]


def test_the_grants_approver_may_still_reject_a_draft_it_covered(runtime, demo, door, orders):
    grant_in_core(runtime, demo, **SMALL, **A_DAY)
    covered = refund(door, orders, 1_000)
    reject_in_core(runtime, demo, covered, "not this one", approver="alice")
    assert detail(runtime, demo, covered).status is DraftStatus.REJECTED


def test_a_grant_that_expired_covers_nothing_that_has_not_run(
    runtime, demo, door, orders, monkeypatch
):
    grant_in_core(runtime, demo, **SMALL, **A_DAY)
    covered = refund(door, orders, 1_000)
    execution_id = request_execution_in_core(runtime, demo, covered)[0].id
    later = utcnow() + timedelta(days=2)  # its 24 h are over when the worker counts
    monkeypatch.setattr(proof, "utcnow", lambda: later)
    [shown] = detail(runtime, demo, covered).approvals
    assert (shown.counts, shown.problem) == (False, "the grant has expired")
    runner.run_execution(runtime, execution_id)
    execution = state(runtime, execution_id)[0]
    assert (execution.status, execution.error["code"]) == ("failed", "APPROVALS_UNVERIFIED")


def test_a_grant_may_not_start_further_ahead_than_it_may_stand(runtime, demo):
    with pytest.raises(DomainError) as refused:
        grant_in_core(runtime, demo, **SMALL, **A_DAY, not_before="9999-12-31T00:00:00Z")
    assert refused.value.code == "GRANT_NOT_ALLOWED"


def ago(seconds: int) -> str:
    return rfc3339_seconds(utcnow() - timedelta(seconds=seconds))


def test_policies_simulate_says_which_grant_would_have_covered_a_draft(runtime, demo, door, orders):
    grant = grant_in_core(runtime, demo, **SMALL, **A_DAY)
    small, large = refund(door, orders, 1_500), refund(door, orders, 2_500)
    with session_scope(runtime.engine) as session:
        result = simulation.simulate(
            session,
            runtime.policies,
            runtime.policies,
            since=utcnow() - timedelta(days=1),
            tenant="demo",
            default_ttl_seconds=86_400,
        )
    covered = {d.draft_id: d.grant for d in result.drafts}
    assert (covered[small], covered[large]) == (grant, None)
    assert result.granted == 1
    without = {
        **runtime.policies,
        "refund": runtime.policies["refund"].model_copy(update={"grants": None}),
    }
    with session_scope(runtime.engine) as session:
        again = simulation.simulate(
            session,
            runtime.policies,
            without,
            since=utcnow() - timedelta(days=1),
            tenant="demo",
            default_ttl_seconds=86_400,
        )
    assert again.granted == 0  # a policy that grants nothing: no grant would cover it
