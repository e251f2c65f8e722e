"""Security issue §7: revocation is the answer to a stolen key, so what the key approved no
longer counts once it is revoked: the execute request is refused APPROVAL_KEY_REVOKED, the
worker refuses an execution queued before the revocation, and the approver's view keeps
showing the approval as historical."""

from __future__ import annotations

import pytest
from sqlmodel import Session, select

from service.db import session_scope
from service.drafts import review
from service.drafts.models import Draft
from service.errors import DomainError
from service.executions import runner
from service.executions.models import Execution
from service.keys import actions as keys
from service.shop.models import Refund
from service.sql import utcnow
from service.tokens import actions as tokens
from tests.security.helpers import agent, events, propose_refund
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def revoke_alices_key(runtime, demo) -> None:
    with session_scope(runtime.engine) as session:
        keys.revoke(
            session,
            tenant="demo",
            key_id=demo["approvers"]["alice"]["key_id"],
            actor="admin:root",
        )


def test_execute_is_refused_once_an_approving_key_is_revoked(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    revoke_alices_key(runtime, demo)

    with pytest.raises(DomainError) as refused:
        request_execution_in_core(runtime, demo, draft_id)

    assert refused.value.code == "APPROVAL_KEY_REVOKED"
    assert refused.value.details == {"revoked_approvers": ["alice"]}
    with Session(runtime.engine) as session:
        assert session.exec(select(Execution)).all() == []


def test_the_worker_refuses_an_execution_queued_before_the_revocation(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    execution, _ = request_execution_in_core(runtime, demo, draft_id)
    revoke_alices_key(runtime, demo)

    assert runner.run_execution(runtime, execution.id).status == "failed"

    with session_scope(runtime.engine) as session:
        stored = session.get(Execution, execution.id)
        assert stored is not None
        assert stored.error is not None
        assert (stored.error["code"], stored.error["security"]) == ("APPROVAL_KEY_REVOKED", False)
        assert session.exec(select(Refund)).all() == []
        draft = session.get(Draft, draft_id)
        assert draft is not None
        assert draft.status == "failed"
    assert events(runtime, "execution.refused", draft_id)[0].data["error"]["code"] == (
        "APPROVAL_KEY_REVOKED"
    )


def test_the_approval_stays_visible_as_historical(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    revoke_alices_key(runtime, demo)

    with session_scope(runtime.engine) as session:
        auditor = tokens.authenticate(session, demo["tokens"]["auditor"])
        detail = review.get_detail(session, auditor, draft_id, runtime=runtime, now=utcnow())

    (approval,) = detail.approvals
    assert (approval.approver, approval.decision, approval.counts) == ("alice", "approve", False)
    assert approval.problem is not None
    assert "revoked after it signed" in approval.problem
    assert [e.type for e in events(runtime, "approval.approved", draft_id)] == ["approval.approved"]


def test_an_approval_by_a_revoked_key_no_longer_helps_reach_a_quorum(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo), 60_000)["draft_id"]  # needs two
    approve_in_core(runtime, demo, draft_id, "alice")
    revoke_alices_key(runtime, demo)
    approve_in_core(runtime, demo, draft_id, "bob")

    with Session(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        assert draft.status == "proposed"  # bob alone is not enough
