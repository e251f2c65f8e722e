"""Security issue §9: a refund cannot be split to stay under a tier. Refunds of one order add
up over the policy's window (executed and open drafts; rejected, expired or failed ones do
not count), and the quorum re-check uses the same total, whatever the stored columns say."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session, col

from service.db import session_scope
from service.drafts.models import Draft
from service.sql import utcnow
from tests.security.helpers import agent, propose_refund
from tests.support.core import approve_in_core

HALF = 40_000  # 400.00 USD: under the 500.00 USD single-approver bound on its own


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def stored(runtime, draft_id: str) -> Draft:
    with Session(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        return draft


def test_the_second_half_of_a_split_refund_needs_two_approvers(runtime, demo):
    door = agent(runtime, demo)
    first = propose_refund(door, HALF)
    second = propose_refund(door, HALF + 1)

    assert first["approvals"]["required"] == 1
    assert second["approvals"]["required"] == 2
    policy = stored(runtime, second["draft_id"]).policy
    assert policy["cumulative_minor"] == 2 * HALF + 1
    assert "800.01 USD with the earlier drafts of the same order_id" in policy["rule"]


def test_a_rejected_or_expired_peer_does_not_count(runtime, demo):
    door = agent(runtime, demo)
    first = propose_refund(door, HALF)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft).where(col(Draft.id) == first["draft_id"]).values(status="rejected")
        )
    assert propose_refund(door, HALF + 1)["approvals"]["required"] == 1


def test_a_peer_outside_the_window_does_not_count(runtime, demo):
    door = agent(runtime, demo)
    first = propose_refund(door, HALF)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == first["draft_id"])
            .values(created_at=utcnow() - timedelta(days=31))
        )
    assert propose_refund(door, HALF + 1)["approvals"]["required"] == 1


def test_lowering_the_stored_requirement_does_not_let_one_approver_through(runtime, demo):
    door = agent(runtime, demo)
    propose_refund(door, HALF)
    second = propose_refund(door, HALF + 1)["draft_id"]
    with session_scope(runtime.engine) as session:  # someone with database access
        session.execute(update(Draft).where(col(Draft.id) == second).values(approvals_required=1))

    approve_in_core(runtime, demo, second, "alice")

    assert stored(runtime, second).status == "proposed"  # the re-check still wants two
    approve_in_core(runtime, demo, second, "bob")
    assert stored(runtime, second).status == "approved"


def test_peers_are_per_order(runtime, demo):
    door = agent(runtime, demo)
    propose_refund(door, HALF)
    other = door.call(
        "propose_refund",
        {
            "order_id": demo["orders"]["shipped"],
            "amount": {"amount_minor": 1_000, "currency": "USD"},
            "reason": "late_delivery",
        },
        "0" * 32,
        None,
    )
    assert other["approvals"]["required"] == 1
