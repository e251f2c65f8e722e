"""The worker trusts no flag (DESIGN.md §5): it re-verifies every counted signature against the
params as stored and recomputes the policy, whatever the database says.

The attacker here can write to the database (a compromised service account, a careless
migration) but holds no approver's private key. They mark drafts approved, edit approved
params, lower the number of approvals required, or queue executions behind the API's back.
Nothing of it may reach the shop; every refusal is audited.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from harness.approvals import approve, bearer
from mcp_adapter.tools import ToolDoor
from service.api.publisher import celery_publisher
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft
from service.errors import DomainError
from service.executions import actions as executions
from service.executions import runner
from service.executions.models import Execution, OutboxMessage
from service.executions.outbox import publish_pending
from service.executions.schemas import EXECUTE_TASK
from service.runtime import Runtime
from service.shop.models import Refund
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.backends import sqlite_only
from tests.support.core import approve_in_core, request_execution_in_core
from tests.workers.helpers import POLL_SECONDS, restart_worker

ORDER = "ORD-1004"  # delivered, total 785.00 USD
SMALL = 2_500  # 25.00 USD: one approver
LARGE = 60_000  # 600.00 USD: two approvers
FINISHED = ("succeeded", "failed")


# --- helpers ------------------------------------------------------------------------------


def refund_arguments(amount_minor: int, order: str = ORDER) -> dict[str, Any]:
    return {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }


def propose_refund(
    runtime: Runtime, demo: dict[str, Any], amount_minor: int, order: str = ORDER
) -> str:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = refund_arguments(amount_minor, order)
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def tamper(engine: Any, draft_id: str, **values: Any) -> None:
    """Write to the drafts table directly, as an attacker with database access would."""
    with session_scope(engine) as session:
        session.execute(update(Draft).where(col(Draft.id) == draft_id).values(**values))


def execute(stack: Any, draft_id: str) -> httpx.Response:
    return httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )


def queue_behind_the_apis_back(stack: Any, draft_id: str) -> str:
    """Insert the execution and its outbox row directly, then publish: no endpoint involved."""
    now = utcnow()
    with session_scope(stack.runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        execution = Execution(
            id="exe_" + secrets.token_hex(12),
            tenant=draft.tenant,
            draft_id=draft.id,
            revision=draft.revision,
            action=draft.action,
            idempotency_key=f"{draft.id}:{draft.revision}",
            status="queued",
            requested_by="approver:alice",
            trace_id=draft.trace_id,
            created_at=now,
            updated_at=now,
        )
        session.add(execution)
        session.flush()
        session.add(OutboxMessage(task=EXECUTE_TASK, execution_id=execution.id, created_at=now))
        execution_id = execution.id
    published = publish_pending(
        stack.runtime.engine, celery_publisher(stack.settings), execution_id=execution_id
    )
    assert published == 1
    return execution_id


def wait_for_execution(engine: Any, execution_id: str, timeout: float = 60) -> Execution:
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(engine) as session:
            execution = session.get(Execution, execution_id)
        assert execution is not None
        if execution.status in FINISHED or time.monotonic() > deadline:
            return execution
        time.sleep(POLL_SECONDS)


def refunds(engine: Any) -> list[Refund]:
    with session_scope(engine) as session:
        return list(session.exec(select(Refund)).all())


def events(engine: Any, draft_id: str, type_: str) -> list[dict[str, Any]]:
    with session_scope(engine) as session:
        return [
            e.model_dump()
            for e in audit_repository.events_for(session, "demo", draft_id=draft_id, type_=type_)
        ]


def chain_verifies(engine: Any) -> bool:
    with session_scope(engine) as session:
        return audit_actions.verify(session, "demo").ok


def agent_view(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> dict[str, Any]:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    view: dict[str, Any] = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    return view


def assert_refused_by_the_worker(
    stack: Any, draft_id: str, execution_id: str, worker: Any = None
) -> Execution:
    engine = stack.runtime.engine
    execution = wait_for_execution(engine, execution_id)
    assert execution.status == "failed", (worker or stack.worker).output()[-3000:]
    assert execution.error is not None
    assert execution.error["code"] == "APPROVALS_UNVERIFIED"
    assert execution.error["security"] is True
    assert execution.outcome is None
    [refused] = events(engine, draft_id, "security.execution_refused")
    assert refused["execution_id"] == execution_id
    assert refused["actor"] == "system:worker"
    assert refused["data"]["error"]["message"] == execution.error["message"]
    assert events(engine, draft_id, "execution.started") == []  # refused before any attempt
    assert refunds(engine) == []
    view = agent_view(stack.runtime, stack.demo, draft_id)
    assert view["status"] == "failed"
    assert "could not be verified" in view["reason"]
    assert chain_verifies(engine)
    return execution


# --- with a real worker -------------------------------------------------------------------


def test_a_draft_marked_approved_in_the_database_is_executed_by_nobody(stack):
    engine = stack.runtime.engine
    draft_id = propose_refund(stack.runtime, stack.demo, SMALL)
    tamper(engine, draft_id, status="approved")  # no approval was ever signed

    refused = execute(stack, draft_id)

    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["code"] == "APPROVALS_UNVERIFIED"
    assert problem["retryable"] is False
    assert problem["details"]["security"] is True
    assert problem["details"]["verified_approvers"] == []
    [audited] = events(engine, draft_id, "execution.refused")
    assert audited["data"]["error"]["code"] == "APPROVALS_UNVERIFIED"
    with session_scope(engine) as session:
        assert session.exec(select(Execution)).all() == []

    # Behind the endpoint's back: the worker checks again and refuses.
    execution_id = queue_behind_the_apis_back(stack, draft_id)
    execution = assert_refused_by_the_worker(stack, draft_id, execution_id)
    assert "0 of 1 required approvals verify" in execution.error["message"]


def test_params_edited_after_approval_are_refused_by_the_worker(stack, stack_host):
    engine = stack.runtime.engine
    draft_id = propose_refund(stack.runtime, stack.demo, SMALL)
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    with session_scope(engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        signed_digest, params = draft.params_sha256, dict(draft.params)

    # The execution is accepted while the params are intact; they change before a worker runs.
    stack.worker.kill()
    accepted = execute(stack, draft_id)
    assert accepted.status_code == 202, accepted.text
    bigger = {**params, "amount": {"amount_minor": 70_000, "currency": "USD"}}
    tamper(engine, draft_id, params=bigger)  # params_sha256 left as signed

    worker = restart_worker(stack, stack_host)
    execution = assert_refused_by_the_worker(
        stack, draft_id, accepted.json()["execution_id"], worker
    )
    assert "params_sha256" in execution.error["message"]
    with session_scope(engine) as session:
        stored = drafts_repository.get(session, "demo", draft_id)
        assert stored is not None
        assert stored.params_sha256 == signed_digest

    # And a draft edited before anyone asked to execute it is refused at the endpoint.
    other_id = propose_refund(stack.runtime, stack.demo, SMALL + 100)
    assert approve(stack.api_url, stack.demo, other_id, "alice").status_code == 201
    with session_scope(engine) as session:
        other = drafts_repository.get(session, "demo", other_id)
        assert other is not None
        edited = {**other.params, "amount": {"amount_minor": 70_000, "currency": "USD"}}
    tamper(engine, other_id, params=edited)
    refused = execute(stack, other_id)
    assert refused.status_code == 409
    assert refused.json()["code"] == "APPROVALS_UNVERIFIED"
    assert refunds(engine) == []


def test_a_lowered_approval_count_is_recomputed_by_the_worker(stack):
    engine = stack.runtime.engine
    draft_id = propose_refund(stack.runtime, stack.demo, LARGE)  # alice AND bob
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    tamper(engine, draft_id, approvals_required=1, status="approved")

    refused = execute(stack, draft_id)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "APPROVALS_UNVERIFIED"
    assert refused.json()["details"]["required"] == 2
    assert refused.json()["details"]["verified_approvers"] == ["alice"]

    execution_id = queue_behind_the_apis_back(stack, draft_id)
    execution = assert_refused_by_the_worker(stack, draft_id, execution_id)
    assert "1 of 2 required approvals verify" in execution.error["message"]


# --- the same checks, core-level (both databases): columns the signature does not cover ----


def approve_core(runtime: Runtime, demo: dict[str, Any], draft_id: str, approver: str) -> None:
    approve_in_core(runtime, demo, draft_id, approver)


def request_core(runtime: Runtime, demo: dict[str, Any], draft_id: str) -> Execution:
    return request_execution_in_core(runtime, demo, draft_id)[0]


@pytest.mark.parametrize(
    "tampering",
    [
        pytest.param({"amount_minor": 100}, id="amount-column-lowered"),
        pytest.param({"policy": {"name": "unconfigured"}}, id="policy-renamed"),
        pytest.param({"policy": {"name": "cancel_order"}}, id="policy-swapped"),
    ],
)
def test_unsigned_draft_columns_cannot_lower_the_policy(runtime, demo, tampering):
    """The approvers sign params_sha256, not the draft's ``amount_minor``/``currency`` columns
    nor its stored ``policy``. The required approvals must not follow those columns down.

    BUG (amount-column-lowered): check_quorum recomputes the policy from the stored
    ``amount_minor``/``currency`` columns, so lowering ``amount_minor`` (with
    ``approvals_required``) in the database makes one approval enough for a 600.00 USD
    refund: the endpoint accepts it and the worker pays it out. The amount must come from
    the signed params (via the action), not from an unsigned column.
    """
    draft_id = propose_refund(runtime, demo, LARGE)
    approve_core(runtime, demo, draft_id, "alice")  # one of the two required
    with session_scope(runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        policy = {**draft.policy, **tampering.get("policy", {})}
    tamper(
        runtime.engine,
        draft_id,
        approvals_required=1,
        status="approved",
        **{**tampering, "policy": policy},
    )

    refused_with = None
    try:
        execution = request_core(runtime, demo, draft_id)
    except DomainError as error:
        refused_with = error.code
    else:  # the endpoint let it through: does the worker stop it?
        runner.run_execution(runtime, execution.id)
    paid_out = refunds(runtime.engine)

    assert (refused_with, [r.amount_minor for r in paid_out]) == ("APPROVALS_UNVERIFIED", [])


@sqlite_only  # a role matrix: backend-free
@pytest.mark.parametrize("token", ["agent", "auditor", "admin"])
def test_only_an_approver_may_request_an_execution(runtime, demo, token):
    draft_id = propose_refund(runtime, demo, SMALL)
    approve_core(runtime, demo, draft_id, "alice")
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"][token])
    with pytest.raises(DomainError) as refused, session_scope(runtime.engine) as session:
        executions.request(session, principal, draft_id=draft_id, runtime=runtime, now=utcnow())
    assert refused.value.category.value == "permission_denied"
    with session_scope(runtime.engine) as session:
        assert session.exec(select(Execution)).all() == []
