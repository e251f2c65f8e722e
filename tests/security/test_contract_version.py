"""Security issue §2: ``contract_version`` is signed, so it must mean something. When the
running code declares another contract for a draft's action than the draft was proposed
under, approval, the execute request and the worker all fail closed with CONTRACT_CHANGED;
a revision takes the current contract and so needs fresh approvals."""

from __future__ import annotations

import pytest
from sqlmodel import Session, select

from service.db import session_scope
from service.drafts.models import Draft
from service.errors import DomainError
from service.executions import runner
from service.executions.models import Execution
from service.shop.models import Refund
from tests.security.helpers import agent, events, propose_refund, with_refund_contract_2
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # the rule is the core's, not the database's


def draft(runtime, draft_id: str) -> Draft:
    with Session(runtime.engine) as session:
        found = session.get(Draft, draft_id)
        assert found is not None
        return found


def test_approving_a_draft_of_an_older_contract_is_refused(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    upgraded = with_refund_contract_2(runtime)

    with pytest.raises(DomainError) as refused:
        approve_in_core(upgraded, demo, draft_id)

    assert refused.value.code == "CONTRACT_CHANGED"
    assert refused.value.details == {"draft_contract_version": 1, "current_contract_version": 2}
    assert draft(runtime, draft_id).status == "proposed"


def test_executing_an_approved_draft_of_an_older_contract_is_refused(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    upgraded = with_refund_contract_2(runtime)

    with pytest.raises(DomainError) as refused:
        request_execution_in_core(upgraded, demo, draft_id)

    assert refused.value.code == "CONTRACT_CHANGED"
    assert draft(runtime, draft_id).status == "approved"
    with Session(runtime.engine) as session:
        assert session.exec(select(Execution)).all() == []


def test_the_worker_refuses_an_execution_whose_contract_changed_since_it_was_queued(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    approve_in_core(runtime, demo, draft_id)
    execution, _ = request_execution_in_core(runtime, demo, draft_id)  # queued under v1

    result = runner.run_execution(with_refund_contract_2(runtime), execution.id)

    assert result.status == "failed"
    with session_scope(runtime.engine) as session:
        stored = session.get(Execution, execution.id)
        assert stored is not None
        assert stored.error is not None
        assert (stored.error["code"], stored.error["security"]) == ("CONTRACT_CHANGED", False)
        assert session.exec(select(Refund)).all() == []  # nothing was executed
    assert draft(runtime, draft_id).status == "failed"
    [refused] = events(runtime, "execution.refused", draft_id)
    assert refused.data["error"]["code"] == "CONTRACT_CHANGED"
    assert events(runtime, "execution.started", draft_id) == []


def test_a_revision_takes_the_current_contract_and_needs_fresh_approvals(runtime, demo):
    draft_id = propose_refund(agent(runtime, demo))["draft_id"]
    upgraded = with_refund_contract_2(runtime)

    revised = propose_refund(agent(upgraded, demo), 2_600, draft_id=draft_id)

    assert revised["revision"] == 2
    assert draft(runtime, draft_id).contract_version == 2
    approve_in_core(upgraded, demo, draft_id)  # signed over contract 2: accepted
    assert draft(runtime, draft_id).status == "approved"
