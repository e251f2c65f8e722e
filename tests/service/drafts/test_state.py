"""The one owner of draft status: every (from, to) pair, allowed or refused, and what an
allowed move writes (status, reason, updated_at, open_dedupe_key, the audit event). That
nothing else writes them: tests/test_row_owners.py."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts import state
from service.drafts.models import OPEN_STATUSES, Draft, DraftStatus
from service.sql import utcnow

PAIRS = list(itertools.product(DraftStatus, DraftStatus))
EXPECTED = {
    DraftStatus.PROPOSED: {
        DraftStatus.APPROVED,
        DraftStatus.REJECTED,
        DraftStatus.EXPIRED,
        DraftStatus.WITHDRAWN,
    },
    DraftStatus.APPROVED: {
        DraftStatus.QUEUED,
        DraftStatus.REJECTED,
        DraftStatus.EXPIRED,
        DraftStatus.FAILED,
    },
    DraftStatus.QUEUED: {DraftStatus.RUNNING, DraftStatus.FAILED, DraftStatus.EXPIRED},
    DraftStatus.RUNNING: {DraftStatus.QUEUED, DraftStatus.SUCCEEDED, DraftStatus.FAILED},
}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # the state machine does not depend on the database


def make_draft(session: Session, status: DraftStatus) -> Draft:
    now = utcnow()
    draft = Draft(
        id="dft_" + "0" * 32,
        tenant="demo",
        action="refund",
        contract_version=1,
        revision=2,
        params={"order_id": "ORD-1004"},
        params_sha256="a" * 64,
        summary="Refund",
        risk="low",
        policy={"rule": "any amount: 1 approver"},
        approvals_required=1,
        proposed_by="support-agent",
        on_behalf_of="cust-ada",
        status=status,
        open_dedupe_key="d" * 64 if status in OPEN_STATUSES else None,
        created_at=now - timedelta(hours=1),
        updated_at=now - timedelta(hours=1),
        expires_at=now + timedelta(hours=1),
    )
    session.add(draft)
    session.flush()
    return draft


def test_the_table_is_exactly_the_documented_state_machine():
    assert {k: set(v) for k, v in state.TRANSITIONS.items() if v} == EXPECTED
    assert all(not state.TRANSITIONS[s] for s in DraftStatus if s not in EXPECTED)


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_every_pair_is_either_made_with_its_event_or_refused_untouched(runtime, current, target):
    allowed = target in EXPECTED.get(current, set())
    with session_scope(runtime.engine) as session:
        draft = make_draft(session, current)
        before = draft.updated_at
        if not allowed:
            with pytest.raises(state.IllegalTransition):
                state.transition(session, draft, target, now=utcnow(), actor="test:x")
            assert draft.status is current
            assert draft.updated_at == before
            return
        now = utcnow()
        state.transition(
            session, draft, target, now=now, actor="test:x", trace_id="f" * 32, reason="why"
        )
    with session_scope(runtime.engine) as session:
        stored = session.get(Draft, "dft_" + "0" * 32)
        assert stored is not None
        assert stored.status is target
        assert stored.status_reason == "why"
        assert stored.updated_at == now
        assert (stored.open_dedupe_key is None) is (target not in OPEN_STATUSES)
        [event] = session.exec(select(AuditEvent)).all()
    assert (event.type, event.actor, event.draft_id, event.trace_id) == (
        f"draft.{target.value}",
        "test:x",
        "dft_" + "0" * 32,
        "f" * 32,
    )
    assert event.data == {"from": current.value, "revision": 2, "reason": "why"}
