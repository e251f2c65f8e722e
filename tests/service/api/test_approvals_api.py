"""Signed approvals over HTTP: every acceptance rule of DESIGN.md §4, and its refusal.

Each refusal is checked four ways: the status code and problem+json body (``code``,
``retryable``), the one audit event it leaves (``approval.refused`` with that code), and that
nothing else was recorded (no approval row, draft status and revision unchanged, no other
audit event for the draft).

The API runs in-process (``httpx.ASGITransport``, tests/support/api_client.py); the happy
path and the refusal of credentials also run against a real uvicorn server. The refusal
matrix (identity, keys, signatures, statements, roles, bodies) runs on SQLite; what the
database decides (quorum counts over stored approvals, one signature per approver and
revision, expiry) runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update
from sqlmodel import Session, col

from harness.approvals import signed_decision
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.models import Approval
from service.approvals.schemas import Decision
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import Draft
from service.executions import actions as executions
from service.executions.models import Execution
from service.keys import actions as keys
from service.principal import Role
from service.shop.seed import seed_shop
from service.signing import generate_private_key, public_key_b64, write_private_key
from service.sql import rfc3339_seconds, utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.api_client import (
    bearer,
    get_draft,
    in_process,
    served,
)
from tests.support.backends import both_backends
from tests.support.mcp_client import connect

PROBLEM_JSON = "application/problem+json"
TENANT = "demo"
OPERATOR = "operator:test"
SMALL = 2_500  # 25.00 USD: one approver
LARGE = 60_000  # 600.00 USD: two approvers


# --- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def served_api(runtime, demo) -> Iterator[httpx.Client]:
    """The same API behind a real uvicorn server."""
    with served(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    """The demo agent (support-agent acting for cust-ada)."""
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def propose(door: ToolDoor, amount_minor: int = SMALL, **extra: Any) -> dict[str, Any]:
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        **extra,
    }
    return door.call("propose_refund", arguments, new_trace_id(), None)


def token(demo: dict[str, Any], who: str) -> str:
    return str(demo["tokens"][who if who in demo["tokens"] else f"approver_{who}"])


def key_file(demo: dict[str, Any], approver: str) -> str:
    return str(demo["approvers"][approver]["private_key_file"])


def body_for(
    api: httpx.Client, demo: dict[str, Any], draft_id: str, approver: str, **kwargs: Any
) -> dict[str, Any]:
    """A correctly signed decision of ``approver`` on the draft as it is now."""
    draft = get_draft(api, token(demo, approver), draft_id)
    return signed_decision(draft, approver=approver, key_file=key_file(demo, approver), **kwargs)


def post_approval(api: httpx.Client, who_token: str, draft_id: str, body: Any) -> httpx.Response:
    return api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(who_token))


def decide(
    api: httpx.Client, demo: dict[str, Any], draft_id: str, approver: str, **kwargs: Any
) -> httpx.Response:
    body = body_for(api, demo, draft_id, approver, **kwargs)
    return post_approval(api, token(demo, approver), draft_id, body)


def execute(api: httpx.Client, who_token: str, draft_id: str) -> httpx.Response:
    return api.post(f"/v1/drafts/{draft_id}/execute", headers=bearer(who_token))


@dataclass(frozen=True)
class Snapshot:
    status: str
    revision: int
    approvals: int
    executions: int
    events: int


def snapshot(runtime, draft_id: str) -> Snapshot:
    """What the database holds about a draft (read without the API)."""
    with Session(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        return Snapshot(
            status=draft.status,
            revision=draft.revision,
            approvals=_count(session, Approval, col(Approval.draft_id) == draft_id),
            executions=_count(session, Execution, col(Execution.draft_id) == draft_id),
            events=_count(session, AuditEvent, col(AuditEvent.draft_id) == draft_id),
        )


def _count(session: Session, model: Any, *where: Any) -> int:
    return int(session.execute(select(func.count()).select_from(model).where(*where)).scalar_one())


def events(runtime, *, type: str, tenant: str = TENANT) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent)
            .where(col(AuditEvent.tenant) == tenant, col(AuditEvent.type) == type)
            .order_by(col(AuditEvent.seq))
        )
        return list(session.scalars(statement).all())


def draft_events(runtime, draft_id: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent)
            .where(col(AuditEvent.draft_id) == draft_id)
            .order_by(col(AuditEvent.tenant), col(AuditEvent.seq))
        )
        return list(session.scalars(statement).all())


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem: dict[str, Any] = response.json()
    assert problem["code"] == code, problem
    assert problem["status"] == status
    assert problem["retryable"] is False
    assert problem["detail"]
    assert problem["suggested_action"]
    return problem


def assert_refused(
    response: httpx.Response,
    status: int,
    code: str,
    *,
    runtime,
    draft_id: str,
    before: Snapshot,
    event: str = "approval.refused",
    actor: str | None = None,
) -> dict[str, Any]:
    """A refusal: the problem, exactly one new audit event saying so, and nothing else."""
    problem = assert_problem(response, status, code)
    after = snapshot(runtime, draft_id)
    unchanged = (before.status, before.revision, before.approvals, before.executions)
    assert (after.status, after.revision, after.approvals, after.executions) == unchanged, (
        f"the refused request changed something: {before} -> {after}"
    )
    assert after.events == before.events + 1, (
        f"expected exactly one new audit event ({event}) for the refusal, "
        f"got {after.events - before.events}"
    )
    last = draft_events(runtime, draft_id)[-1]
    assert last.type == event
    assert last.data["error"]["code"] == code
    if actor is not None:
        assert last.actor == actor
    return problem


def approvals_of(runtime, draft_id: str) -> list[Approval]:
    with Session(runtime.engine) as session:
        statement = select(Approval).where(col(Approval.draft_id) == draft_id)
        return list(session.scalars(statement.order_by(col(Approval.created_at))).all())


def new_approver(runtime, tmp_path: Path, subject: str, tenant: str = TENANT) -> tuple[str, str]:
    """Issue an approver token and register a fresh key for ``subject``: (token, key file)."""
    private_key = generate_private_key()
    pem = tmp_path / f"{subject}-{tenant}.pem"
    write_private_key(private_key, pem)
    with session_scope(runtime.engine) as session:
        issued = tokens.issue(
            session, tenant=tenant, subject=subject, role=Role.APPROVER, actor=OPERATOR
        )
        keys.register(
            session,
            tenant=tenant,
            approver=subject,
            public_key=public_key_b64(private_key),
            actor=OPERATOR,
        )
    return issued.token, str(pem)


# --- who may sign: identity, key ownership, key state, signature -----------------------------


def test_a_statement_naming_another_approver_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")  # alice's statement, alice's key
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "bob"), draft_id, body)  # bob's token

    assert_refused(
        response,
        403,
        "APPROVER_MISMATCH",
        runtime=runtime,
        draft_id=draft_id,
        before=before,
        actor="approver:bob",
    )


def test_a_statement_signed_with_another_approvers_key_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    draft = get_draft(api, token(demo, "alice"), draft_id)
    # alice's statement, but signed by bob's key and naming bob's key_id
    body = signed_decision(draft, approver="alice", key_file=key_file(demo, "bob"))
    assert body["statement"]["key_id"] == demo["approvers"]["bob"]["key_id"]
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 403, "KEY_NOT_OWNED", runtime=runtime, draft_id=draft_id, before=before
    )


def test_a_statement_naming_an_unregistered_key_is_refused(api, runtime, demo, door, tmp_path):
    draft_id = propose(door)["draft_id"]
    draft = get_draft(api, token(demo, "alice"), draft_id)
    stray = tmp_path / "stray.pem"
    write_private_key(generate_private_key(), stray)
    body = signed_decision(draft, approver="alice", key_file=stray)
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 403, "KEY_NOT_OWNED", runtime=runtime, draft_id=draft_id, before=before
    )


def test_a_statement_signed_with_a_revoked_key_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")
    with session_scope(runtime.engine) as session:
        keys.revoke(
            session, tenant=TENANT, key_id=demo["approvers"]["alice"]["key_id"], actor=OPERATOR
        )
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(response, 403, "KEY_REVOKED", runtime=runtime, draft_id=draft_id, before=before)


def _flip_one_character(signature: str) -> str:
    # The first character carries 6 bits of the signature's first byte (never padding bits).
    return ("B" if signature[0] != "B" else "C") + signature[1:]


def test_a_signature_with_one_character_flipped_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")
    body["signature"] = _flip_one_character(body["signature"])
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 403, "SIGNATURE_INVALID", runtime=runtime, draft_id=draft_id, before=before
    )


def test_a_statement_changed_after_signing_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice", decision=Decision.REJECT, reason="no")
    body["statement"]["reason"] = "no, and here is a different reason"
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 403, "SIGNATURE_INVALID", runtime=runtime, draft_id=draft_id, before=before
    )


# --- what is signed: binding to the draft's current revision -------------------------------


def test_a_correctly_signed_statement_over_another_digest_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    other_digest = hashlib.sha256(b'{"amount":{"amount_minor":99999}}').hexdigest()
    body = body_for(api, demo, draft_id, "alice", params_sha256=other_digest)  # re-signed
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    problem = assert_refused(
        response, 409, "STATEMENT_MISMATCH", runtime=runtime, draft_id=draft_id, before=before
    )
    assert "params_sha256" in problem["detail"]


def test_a_statement_for_another_action_or_contract_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    for member, value in (("action", "cancel_order"), ("contract_version", 2)):
        body = body_for(api, demo, draft_id, "alice", **{member: value})
        before = snapshot(runtime, draft_id)

        response = post_approval(api, token(demo, "alice"), draft_id, body)

        assert response.status_code == 409, (member, response.text)
        problem = assert_refused(
            response, 409, "STATEMENT_MISMATCH", runtime=runtime, draft_id=draft_id, before=before
        )
        assert member in problem["detail"]


def test_a_statement_for_another_draft_than_the_url_is_refused(api, runtime, demo, door):
    target = propose(door, 2_500)["draft_id"]
    other = propose(door, 2_600)["draft_id"]
    body = body_for(api, demo, other, "alice")  # valid for ``other``
    before = snapshot(runtime, target)

    response = post_approval(api, token(demo, "alice"), target, body)

    assert_refused(
        response, 409, "STATEMENT_MISMATCH", runtime=runtime, draft_id=target, before=before
    )
    assert snapshot(runtime, other).approvals == 0


def test_a_statement_for_another_tenant_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice", tenant="acme")
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 409, "STATEMENT_MISMATCH", runtime=runtime, draft_id=draft_id, before=before
    )


def test_an_approver_of_another_tenant_cannot_see_or_sign_the_draft(
    api, runtime, demo, door, tmp_path
):
    draft_id = propose(door)["draft_id"]
    draft = get_draft(api, token(demo, "alice"), draft_id)
    with session_scope(runtime.engine) as session:
        seed_shop(session, "acme", now=utcnow())
    acme_token, acme_key = new_approver(runtime, tmp_path, "mallory", tenant="acme")
    body = signed_decision(draft, approver="mallory", key_file=acme_key, tenant="acme")
    before = snapshot(runtime, draft_id)

    response = post_approval(api, acme_token, draft_id, body)

    assert_problem(response, 404, "DRAFT_UNAVAILABLE")
    after = snapshot(runtime, draft_id)
    assert (after.status, after.approvals) == (before.status, 0)
    refused = events(runtime, type="approval.refused", tenant="acme")
    assert [e.data["error"]["code"] for e in refused] == ["DRAFT_UNAVAILABLE"]
    assert all(
        e.type != "approval.refused" for e in draft_events(runtime, draft_id) if e.tenant == TENANT
    )


def test_a_statement_for_an_earlier_revision_is_refused(api, runtime, demo, door):
    draft_id = propose(door, 2_500)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")  # signed over revision 1
    revised = propose(door, 3_000, draft_id=draft_id)
    assert revised["revision"] == 2
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    problem = assert_refused(
        response, 409, "STALE_REVISION", runtime=runtime, draft_id=draft_id, before=before
    )
    assert "revision 1" in problem["detail"]
    assert "revision 2" in problem["detail"]


def test_a_statement_issued_ten_minutes_away_from_now_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    for minutes in (-10, 10):
        issued_at = rfc3339_seconds(utcnow() + timedelta(minutes=minutes))
        body = body_for(api, demo, draft_id, "alice", issued_at=issued_at)
        before = snapshot(runtime, draft_id)

        response = post_approval(api, token(demo, "alice"), draft_id, body)

        assert response.status_code == 409, (minutes, response.text)
        assert_refused(
            response, 409, "STATEMENT_STALE", runtime=runtime, draft_id=draft_id, before=before
        )


def test_a_statement_issued_a_minute_ago_with_fractions_is_accepted(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    issued_at = (utcnow() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    response = decide(api, demo, draft_id, "alice", issued_at=issued_at)
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "approved"


def test_a_statement_with_an_impossible_issued_at_is_refused_as_invalid(api, runtime, demo, door):
    """2026-02-30 matches the issued_at pattern but is no date: a 400, audited, not a 500."""
    # In-process, a crash would be raised here with its traceback rather than answered 500.
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice", issued_at="2026-02-30T10:00:00Z")
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 400, "INVALID_ARGUMENT", runtime=runtime, draft_id=draft_id, before=before
    )


# --- when: the draft's state --------------------------------------------------------------


@both_backends
def test_an_expired_draft_cannot_be_approved(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(expires_at=utcnow() - timedelta(minutes=1))
        )
    before = snapshot(runtime, draft_id)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_problem(response, 409, "DRAFT_EXPIRED")
    after = snapshot(runtime, draft_id)
    assert after.approvals == 0
    assert before.status == "proposed"
    assert after.status in ("proposed", "expired")  # never approved
    refused = [e for e in draft_events(runtime, draft_id) if e.type == "approval.refused"]
    assert [e.data["error"]["code"] for e in refused] == ["DRAFT_EXPIRED"]
    assert get_draft(api, token(demo, "alice"), draft_id)["status"] == "expired"


def test_a_rejected_draft_accepts_no_more_decisions(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    rejected = decide(api, demo, draft_id, "bob", decision=Decision.REJECT, reason="duplicate")
    assert rejected.status_code == 201, rejected.text
    body = signed_decision(
        get_draft(api, token(demo, "alice"), draft_id),
        approver="alice",
        key_file=key_file(demo, "alice"),
    )
    before = snapshot(runtime, draft_id)
    assert before.status == "rejected"

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_refused(
        response, 409, "DRAFT_NOT_OPEN", runtime=runtime, draft_id=draft_id, before=before
    )


def test_an_approved_draft_accepts_no_further_approval(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "bob")  # bob prepares, alice is faster
    assert decide(api, demo, draft_id, "alice").status_code == 201
    before = snapshot(runtime, draft_id)
    assert before.status == "approved"

    response = post_approval(api, token(demo, "bob"), draft_id, body)

    assert_refused(
        response, 409, "DRAFT_NOT_OPEN", runtime=runtime, draft_id=draft_id, before=before
    )


# --- maker ≠ checker, one signature per approver per revision -----------------------------


def test_the_proposer_cannot_approve_its_own_draft(api, runtime, demo, door, tmp_path):
    draft_id = propose(door)["draft_id"]
    proposer = get_draft(api, token(demo, "alice"), draft_id)["proposed_by"]["agent"]
    assert proposer == "support-agent"
    self_token, self_key = new_approver(runtime, tmp_path, proposer)
    draft = get_draft(api, self_token, draft_id)
    body = signed_decision(draft, approver=proposer, key_file=self_key)
    before = snapshot(runtime, draft_id)

    response = post_approval(api, self_token, draft_id, body)

    assert_refused(
        response,
        403,
        "SELF_APPROVAL",
        runtime=runtime,
        draft_id=draft_id,
        before=before,
        actor="approver:support-agent",
    )


def test_the_end_user_a_draft_was_proposed_for_cannot_approve_it(
    api, runtime, demo, door, tmp_path
):
    draft_id = propose(door)["draft_id"]
    end_user = get_draft(api, token(demo, "alice"), draft_id)["proposed_by"]["on_behalf_of"]
    user_token, user_key = new_approver(runtime, tmp_path, end_user)
    body = signed_decision(
        get_draft(api, user_token, draft_id), approver=end_user, key_file=user_key
    )
    before = snapshot(runtime, draft_id)

    response = post_approval(api, user_token, draft_id, body)

    assert_refused(
        response, 403, "SELF_APPROVAL", runtime=runtime, draft_id=draft_id, before=before
    )


@both_backends
def test_an_approver_signs_a_revision_only_once(api, runtime, demo, door):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    before = snapshot(runtime, draft_id)
    assert (before.status, before.approvals) == ("proposed", 1)

    response = decide(api, demo, draft_id, "alice")  # a fresh, valid second signature

    assert_refused(
        response, 409, "ALREADY_SIGNED", runtime=runtime, draft_id=draft_id, before=before
    )


@both_backends
def test_an_approver_cannot_reject_what_they_already_approved(api, runtime, demo, door):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    before = snapshot(runtime, draft_id)

    response = decide(api, demo, draft_id, "alice", decision=Decision.REJECT, reason="changed mind")

    assert_refused(
        response, 409, "ALREADY_SIGNED", runtime=runtime, draft_id=draft_id, before=before
    )


# --- roles ---------------------------------------------------------------------------------


def test_only_approvers_may_post_decisions(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    for who in ("agent", "auditor", "admin"):
        body = body_for(api, demo, draft_id, "alice")
        before = snapshot(runtime, draft_id)

        response = post_approval(api, token(demo, who), draft_id, body)

        assert response.status_code == 403, (who, response.text)
        assert_refused(
            response, 403, "PERMISSION_DENIED", runtime=runtime, draft_id=draft_id, before=before
        )


def _execution_of_an_approved_draft(api, runtime, demo, door) -> tuple[str, str]:
    draft_id = propose(door, 4_000)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, token(demo, "alice"))
        execution, created = executions.request(
            session, alice, draft_id=draft_id, runtime=runtime, now=utcnow()
        )
    assert created
    return draft_id, execution.id


def test_an_agent_token_is_refused_on_every_approver_route(api, runtime, demo, door):
    _, execution_id = _execution_of_an_approved_draft(api, runtime, demo, door)
    other = propose(door)["draft_id"]
    body = body_for(api, demo, other, "alice")
    agent = bearer(token(demo, "agent"))
    requests = [
        ("GET", "/v1/drafts", None, "drafts.list.refused"),
        ("GET", f"/v1/drafts/{other}", None, "drafts.read.refused"),
        ("POST", f"/v1/drafts/{other}/approvals", body, "approval.refused"),
        ("POST", f"/v1/drafts/{other}/execute", None, "execution.refused"),
        ("GET", f"/v1/executions/{execution_id}", None, "execution.read.refused"),
    ]
    before = snapshot(runtime, other)
    for method, path, json_body, event in requests:
        response = api.request(method, path, json=json_body, headers=agent)
        assert_problem(response, 403, "PERMISSION_DENIED")
        recorded = events(runtime, type=event)
        assert recorded, f"{method} {path} was not audited as {event}"
        assert recorded[-1].actor == "agent:support-agent"
        assert recorded[-1].data["error"]["code"] == "PERMISSION_DENIED"
    after = snapshot(runtime, other)
    assert (after.status, after.approvals, after.executions) == (before.status, 0, 0)


def test_an_auditor_cannot_request_execution(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    before = snapshot(runtime, draft_id)

    response = execute(api, token(demo, "auditor"), draft_id)

    assert_refused(
        response,
        403,
        "PERMISSION_DENIED",
        runtime=runtime,
        draft_id=draft_id,
        before=before,
        event="execution.refused",
        actor="auditor:audrey",
    )


@pytest.mark.parametrize(
    "authorization", [None, "Bearer dg_not-a-real-token", "Basic YWxpY2U6c2VjcmV0"]
)
def test_no_or_an_unknown_token_is_401_with_www_authenticate_and_audited(
    api, runtime, demo, door, authorization
):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")
    headers = {} if authorization is None else {"Authorization": authorization}
    presented = authorization.split()[1] if authorization and "Bearer" in authorization else None
    before = snapshot(runtime, draft_id)
    routes = [
        ("GET", "/v1/drafts", None),
        ("GET", f"/v1/drafts/{draft_id}", None),
        ("POST", f"/v1/drafts/{draft_id}/approvals", body),
        ("POST", f"/v1/drafts/{draft_id}/execute", None),
        ("GET", "/v1/executions/exe_000000000000000000000000", None),
    ]
    for number, (method, path, json_body) in enumerate(routes, start=1):
        response = api.request(method, path, json=json_body, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["content-type"].startswith(PROBLEM_JSON)
        # RFC 9728 §5.1: the challenge names the API's protected-resource metadata.
        assert response.headers["www-authenticate"].startswith("Bearer ")
        assert 'resource_metadata="' in response.headers["www-authenticate"]
        assert response.json()["code"] == "UNAUTHENTICATED"
        assert response.json()["retryable"] is False
        refused = events(runtime, type="auth.refused")
        assert len(refused) == number, f"{method} {path} was not audited"
        assert refused[-1].actor == "anonymous"
        assert refused[-1].data["door"] == "http"
        if presented:
            assert presented not in str(refused[-1].data)
            assert len(refused[-1].data["token_sha256_prefix"]) == 12
    after = snapshot(runtime, draft_id)
    assert (after.status, after.approvals) == (before.status, 0)


def test_a_revoked_approver_token_is_refused(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    body = body_for(api, demo, draft_id, "alice")
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, token(demo, "alice"))
        tokens.revoke(session, tenant=TENANT, token_id=alice.token_id, actor=OPERATOR)

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert_problem(response, 401, "UNAUTHENTICATED")
    assert snapshot(runtime, draft_id).approvals == 0
    assert events(runtime, type="auth.refused")[-1].data["reason"].endswith("revoked.")


# --- malformed bodies ------------------------------------------------------------------------


def _valid_body(api, demo, draft_id) -> dict[str, Any]:
    return body_for(api, demo, draft_id, "alice")


MANGLED_BODIES: dict[str, Any] = {
    "a-json-array": lambda body: [body],
    "a-json-string": lambda body: "approve",
    "a-json-number": lambda body: 42,
    "json-null": lambda body: None,
    "no-signature": lambda body: {"statement": body["statement"]},
    "no-statement": lambda body: {"signature": body["signature"]},
    "extra-member": lambda body: {**body, "comment": "hi"},
    "extra-statement-member": lambda body: {
        **body,
        "statement": {**body["statement"], "extra": 1},
    },
    "null-signature": lambda body: {**body, "signature": None},
    "padded": lambda body: {**body, "signature": body["signature"] + "="},
    "revision-as-string": lambda body: {
        **body,
        "statement": {**body["statement"], "revision": "1"},
    },
}


def test_a_malformed_body_is_400_invalid_argument_and_audited(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    for name, mangle in MANGLED_BODIES.items():
        before = snapshot(runtime, draft_id)

        body = mangle(_valid_body(api, demo, draft_id))

        response = api.post(  # the JSON text itself, so that a JSON null is sent as ``null``
            f"/v1/drafts/{draft_id}/approvals",
            content=json.dumps(body).encode(),
            headers={**bearer(token(demo, "alice")), "Content-Type": "application/json"},
        )

        assert response.status_code == 400, (name, response.text)
        assert_refused(
            response, 400, "INVALID_ARGUMENT", runtime=runtime, draft_id=draft_id, before=before
        )


def test_a_body_that_is_not_json_is_400_invalid_argument_and_audited(api, runtime, demo, door):
    """DESIGN.md §8: every refused attempt, invalid input included, is audited."""
    draft_id = propose(door)["draft_id"]
    for raw in (b'{"statement": {', b"statement=x&signature=y", b""):
        before = snapshot(runtime, draft_id)

        response = api.post(
            f"/v1/drafts/{draft_id}/approvals",
            content=raw,
            headers={**bearer(token(demo, "alice")), "Content-Type": "application/json"},
        )

        assert response.status_code == 400, (raw, response.text)
        assert_refused(
            response, 400, "INVALID_ARGUMENT", runtime=runtime, draft_id=draft_id, before=before
        )


# --- happy paths -----------------------------------------------------------------------------


@both_backends
def test_a_small_refund_approved_by_alice_is_approved(served_api, runtime, demo, door):
    """Over a real uvicorn server, on both backends: the whole wiring of the happy path."""
    api = served_api
    draft_id = propose(door, SMALL)["draft_id"]
    draft = get_draft(api, token(demo, "alice"), draft_id)
    assert (draft["approvals_required"], draft["status"]) == (1, "proposed")
    body = body_for(api, demo, draft_id, "alice")

    response = post_approval(api, token(demo, "alice"), draft_id, body)

    assert response.status_code == 201, response.text
    detail = response.json()
    assert detail["status"] == "approved"
    assert detail["statement_to_sign"] is None  # nothing left to sign
    [approval] = detail["approvals"]
    assert (approval["approver"], approval["decision"], approval["counts"]) == (
        "alice",
        "approve",
        True,
    )
    assert approval["key_id"] == demo["approvers"]["alice"]["key_id"]
    [row] = approvals_of(runtime, draft_id)
    assert row.statement == body["statement"]
    assert row.signature == body["signature"]
    types = [e.type for e in draft_events(runtime, draft_id)]
    assert types[-2:] == ["approval.approved", "draft.approved"]
    assert snapshot(runtime, draft_id).status == "approved"


@both_backends
def test_a_large_refund_needs_alice_and_bob(api, runtime, demo, door):
    draft_id = propose(door, LARGE)["draft_id"]
    assert get_draft(api, token(demo, "alice"), draft_id)["approvals_required"] == 2

    after_alice = decide(api, demo, draft_id, "alice")

    assert after_alice.status_code == 201, after_alice.text
    assert after_alice.json()["status"] == "proposed"
    assert [a["counts"] for a in after_alice.json()["approvals"]] == [True]
    listed = api.get(
        "/v1/drafts", params={"status": "proposed"}, headers=bearer(token(demo, "bob"))
    ).json()["drafts"]
    [line] = [d for d in listed if d["draft_id"] == draft_id]
    progress = line["approvals"]
    assert (progress["required"], progress["received"], progress["approvers"]) == (2, 1, ["alice"])
    agent_view = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert agent_view["status"] == "proposed"
    assert agent_view["approvals"] == {"required": 2, "received": 1}
    assert "1 of 2" in agent_view["message"]

    after_bob = decide(api, demo, draft_id, "bob")

    assert after_bob.status_code == 201, after_bob.text
    assert after_bob.json()["status"] == "approved"
    assert sorted(a["approver"] for a in after_bob.json()["approvals"] if a["counts"]) == [
        "alice",
        "bob",
    ]
    [approved] = [e for e in draft_events(runtime, draft_id) if e.type == "draft.approved"]
    assert approved.data["approvers"] == ["alice", "bob"]


@both_backends
def test_approvals_of_an_earlier_revision_no_longer_count(api, runtime, demo, door):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    assert propose(door, LARGE + 1_000, draft_id=draft_id)["revision"] == 2

    after_bob = decide(api, demo, draft_id, "bob")

    assert after_bob.status_code == 201, after_bob.text
    detail = after_bob.json()
    assert detail["status"] == "proposed", "alice signed revision 1, not revision 2"
    by_approver = {a["approver"]: a for a in detail["approvals"]}
    assert by_approver["alice"]["revision"] == 1
    assert by_approver["alice"]["counts"] is False
    assert by_approver["bob"]["revision"] == 2
    assert by_approver["bob"]["counts"] is True
    # alice may sign the new revision, and then the quorum is met
    assert decide(api, demo, draft_id, "alice").json()["status"] == "approved"


def test_a_rejection_with_a_reason_ends_the_draft_and_the_agent_is_told_plainly(
    api, runtime, demo, door
):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201  # one approval is not enough
    reason = "The customer was already refunded by phone."

    response = decide(api, demo, draft_id, "bob", decision=Decision.REJECT, reason=reason)

    assert response.status_code == 201, response.text
    detail = response.json()
    assert (detail["status"], detail["status_reason"]) == ("rejected", reason)
    rejection = [a for a in detail["approvals"] if a["decision"] == "reject"]
    assert [(a["approver"], a["reason"]) for a in rejection] == [("bob", reason)]
    [row] = [a for a in approvals_of(runtime, draft_id) if a.decision == "reject"]
    assert (row.reason, row.statement["reason"]) == (reason, reason)
    assert snapshot(runtime, draft_id).status == "rejected"
    [event] = [e for e in draft_events(runtime, draft_id) if e.type == "draft.rejected"]
    assert event.data["reason"] == reason

    view = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)

    _assert_told_plainly(view, reason)


def _assert_told_plainly(view: dict[str, Any], reason: str) -> None:
    assert view["status"] == "rejected"
    assert view["reason"] == reason
    message = view["message"].lower()
    assert reason.lower() in message
    assert "declined" in message  # a human declined it
    assert "nothing was executed" in message
    assert "not a system failure" in message
    assert "not a permission" in message
    advice = view["next_action"].lower()
    assert "tell the user" in advice
    assert "do not propose the same change again unchanged" in advice


@pytest.mark.anyio
async def test_get_draft_over_mcp_reports_the_rejection(api, runtime, demo, door, mcp_url):
    draft_id = propose(door)["draft_id"]
    reason = "Order is under a fraud review."
    assert (
        decide(api, demo, draft_id, "bob", decision=Decision.REJECT, reason=reason).status_code
        == 201
    )

    async with connect(mcp_url, token(demo, "agent")) as agent:
        result = await agent.call_tool("get_draft", {"draft_id": draft_id})

    assert not result.is_error
    _assert_told_plainly(result.structured_content, reason)


def test_a_rejection_after_approval_but_before_execution_still_ends_the_draft(
    api, runtime, demo, door, tmp_path
):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201
    assert decide(api, demo, draft_id, "bob").json()["status"] == "approved"
    # a third approver rejects the approved, not yet executed, draft
    carol_token, carol_key = new_approver(runtime, tmp_path, "carol")
    body = signed_decision(
        get_draft(api, carol_token, draft_id),
        approver="carol",
        key_file=carol_key,
        decision=Decision.REJECT,
        reason="stop",
    )

    response = post_approval(api, carol_token, draft_id, body)

    assert response.status_code == 201, response.text
    assert response.json()["status"] == "rejected"
    assert_problem(execute(api, token(demo, "alice"), draft_id), 409, "DRAFT_REJECTED")


# --- execution requests ----------------------------------------------------------------------


def test_execute_before_approval_is_409_not_approved_and_audited(api, runtime, demo, door):
    draft_id = propose(door, LARGE)["draft_id"]
    assert decide(api, demo, draft_id, "alice").status_code == 201  # 1 of 2
    before = snapshot(runtime, draft_id)

    response = execute(api, token(demo, "alice"), draft_id)

    assert_refused(
        response,
        409,
        "NOT_APPROVED",
        runtime=runtime,
        draft_id=draft_id,
        before=before,
        event="execution.refused",
        actor="approver:alice",
    )


def test_execute_a_rejected_draft_is_409_draft_rejected_and_audited(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    assert (
        decide(api, demo, draft_id, "alice", decision=Decision.REJECT, reason="no").status_code
        == 201
    )
    before = snapshot(runtime, draft_id)

    response = execute(api, token(demo, "bob"), draft_id)

    assert_refused(
        response,
        409,
        "DRAFT_REJECTED",
        runtime=runtime,
        draft_id=draft_id,
        before=before,
        event="execution.refused",
    )


@both_backends
def test_execute_an_expired_approved_draft_is_409_draft_expired(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    assert decide(api, demo, draft_id, "alice").json()["status"] == "approved"
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )

    response = execute(api, token(demo, "alice"), draft_id)

    assert_problem(response, 409, "DRAFT_EXPIRED")
    assert snapshot(runtime, draft_id).executions == 0


def test_execute_an_unknown_draft_is_404(api, runtime, demo):
    response = execute(api, token(demo, "alice"), "dft_" + "0" * 32)
    assert_problem(response, 404, "DRAFT_UNAVAILABLE")
    assert events(runtime, type="execution.refused")[-1].data["error"]["code"] == (
        "DRAFT_UNAVAILABLE"
    )


def test_a_request_without_a_token_is_401_even_when_its_body_is_not_json(
    served_api, runtime, demo, door
):
    """Credentials are checked first: a caller without a token learns nothing about the
    endpoint's input rules, and the attempt is audited as a refused credential. (Over a real
    uvicorn server: a truncated body as a socket delivers it.)"""
    draft_id = propose(door)["draft_id"]
    before = len(events(runtime, type="auth.refused"))

    response = served_api.post(
        f"/v1/drafts/{draft_id}/approvals",
        content=b'{"statement": {',
        headers={"Content-Type": "application/json"},
    )

    assert_problem(response, 401, "UNAUTHENTICATED")
    assert len(events(runtime, type="auth.refused")) == before + 1
