"""The worker accepts passkey approvals and browser-made Ed25519 keys' approvals, and refuses
tampered ones (issue 10's acceptance), on the embedded and the production stack.

Approvers act over the real API of a running stack; the passkey is a software authenticator
(tests/support/authenticator.py), the browser's Ed25519 key one generated here and enrolled
as the console does. The attacker writes to the database after the execution was accepted
(authenticator data, client data, params, a signature) and holds no private key: the real
Celery worker re-verifies every approval and refuses, audited.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from harness.approvals import signed_decision
from service.approvals.models import Approval
from service.approvals.schemas import Decision, signed_request, statement_for
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.signing import b64url, b64url_decode, generate_private_key, key_id_for, public_key_b64
from service.sql import rfc3339_seconds, utcnow
from tests.support.authenticator import SoftwareAuthenticator, bearer, enrol_passkey
from tests.workers.helpers import chain_verifies, refunds, restart_worker, wait_for_execution
from tests.workers.test_security import (
    assert_refused_by_the_worker,
    execute,
    propose_refund,
    tamper,
)

RP_ID = "localhost"
ORIGIN = "http://localhost:8000"
SMALL = 2_500  # 25.00 USD: one approver
LARGE = 60_000  # 600.00 USD: two approvers


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # The worker process gets these too (child_environment): it checks the same party.
    return {"webauthn_rp_id": RP_ID, "webauthn_origins": [ORIGIN]}


@pytest.fixture
def api(stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.api_url, timeout=60) as client:
        yield client


def token(stack: Any, approver: str) -> str:
    return str(stack.demo["tokens"][f"approver_{approver}"])


def statement(
    api: httpx.Client, stack: Any, draft_id: str, approver: str, key_id: str
) -> dict[str, Any]:
    draft = api.get(f"/v1/drafts/{draft_id}", headers=bearer(token(stack, approver)))
    assert draft.status_code == 200, draft.text
    return statement_for(
        draft.json(),
        decision=Decision.APPROVE,
        approver=approver,
        key_id=key_id,
        issued_at=rfc3339_seconds(utcnow()),
    )


def post(
    api: httpx.Client, stack: Any, draft_id: str, approver: str, body: dict[str, Any]
) -> dict[str, Any]:
    response = api.post(
        f"/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token(stack, approver))
    )
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def passkey_approval(api, stack, authenticator, key_id, draft_id) -> dict[str, Any]:
    return post(
        api,
        stack,
        draft_id,
        "alice",
        authenticator.approval(statement(api, stack, draft_id, "alice", key_id)),
    )


def browser_key(api: httpx.Client, stack: Any, approver: str) -> Any:
    """A key made as the console makes one, enrolled by its approver, approved by the admin."""
    key = generate_private_key()
    enrolled = api.post(
        "/v1/me/key-enrolments",
        json={"public_key": public_key_b64(key), "label": "browser"},
        headers=bearer(token(stack, approver)),
    )
    assert enrolled.status_code == 201, enrolled.text
    approved = api.post(
        f"/v1/admin/key-enrolments/{enrolled.json()['enrolment_id']}/approve",
        headers=bearer(stack.demo["tokens"]["admin"]),
    )
    assert approved.status_code == 200, approved.text
    return key


def browser_approval(api, stack, key, draft_id, approver="bob") -> dict[str, Any]:
    signed = statement(api, stack, draft_id, approver, key_id_for(public_key_b64(key)))
    return post(api, stack, draft_id, approver, signed_request(signed, key))


def approval_of(stack: Any, draft_id: str) -> Approval:
    with session_scope(stack.runtime.engine) as session:
        [approval] = session.exec(select(Approval).where(col(Approval.draft_id) == draft_id)).all()
        session.expunge(approval)
        return approval


def tamper_approval(stack: Any, draft_id: str, **values: Any) -> None:
    with session_scope(stack.runtime.engine) as session:
        session.execute(update(Approval).where(col(Approval.draft_id) == draft_id).values(**values))


def test_the_worker_executes_passkey_browser_key_and_mixed_approvals_once(stack, api):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    key_id = enrol_passkey(api, stack.demo, "alice", authenticator)
    bobs_key = browser_key(api, stack, "bob")
    # Each on an order of its own: refunds approved together on one order refuse each other
    # (the second would find the order changed: SOURCE_CHANGED).
    by_passkey = propose_refund(stack.runtime, stack.demo, SMALL, order="ORD-1003")
    by_browser_key = propose_refund(stack.runtime, stack.demo, SMALL + 100, order="ORD-1002")
    by_both = propose_refund(stack.runtime, stack.demo, LARGE)

    assert passkey_approval(api, stack, authenticator, key_id, by_passkey)["status"] == "approved"
    assert browser_approval(api, stack, bobs_key, by_browser_key)["status"] == "approved"
    bob = signed_decision(
        api.get(f"/v1/drafts/{by_both}", headers=bearer(token(stack, "bob"))).json(),
        approver="bob",
        key_file=stack.demo["approvers"]["bob"]["private_key_file"],
    )
    assert post(api, stack, by_both, "bob", bob)["status"] == "proposed"
    assert passkey_approval(api, stack, authenticator, key_id, by_both)["status"] == "approved"

    executions = {}
    for draft_id in (by_passkey, by_browser_key, by_both):
        accepted = execute(stack, draft_id)
        assert accepted.status_code == 202, accepted.text
        executions[draft_id] = accepted.json()["execution_id"]
    for draft_id, execution_id in executions.items():
        body = wait_for_execution(stack, execution_id)
        assert body["status"] == "succeeded", (draft_id, body, stack.worker.output()[-3000:])

    paid = sorted(refund.amount_minor for refund in refunds(stack))
    assert paid == [SMALL, SMALL + 100, LARGE]  # each exactly once
    assert approval_of(stack, by_passkey).scheme == "webauthn"
    assert chain_verifies(stack)


def test_the_worker_refuses_tampered_passkey_and_browser_key_approvals(stack, stack_host, api):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    key_id = enrol_passkey(api, stack.demo, "alice", authenticator)
    bobs_key = browser_key(api, stack, "bob")
    drafts = {
        name: propose_refund(stack.runtime, stack.demo, SMALL + index)
        for index, name in enumerate(
            [
                "authenticator-data",
                "client-data",
                "params",
                "assertion-signature",
                "ed25519-signature",
            ]
        )
    }
    for name, draft_id in drafts.items():
        if name == "ed25519-signature":
            browser_approval(api, stack, bobs_key, draft_id)
        else:
            passkey_approval(api, stack, authenticator, key_id, draft_id)

    # Accepted while intact; changed in the database before any worker runs them.
    stack.worker.kill()
    executions = {}
    for name, draft_id in drafts.items():
        accepted = execute(stack, draft_id)
        assert accepted.status_code == 202, (name, accepted.text)
        executions[name] = accepted.json()["execution_id"]

    signed = approval_of(stack, drafts["authenticator-data"])
    data = bytearray(b64url_decode(signed.authenticator_data))
    data[32] &= ~0x04  # the user-verified flag cleared
    tamper_approval(stack, drafts["authenticator-data"], authenticator_data=b64url(bytes(data)))
    made_elsewhere = b64url_decode(approval_of(stack, drafts["client-data"]).client_data_json)
    tamper_approval(
        stack,
        drafts["client-data"],
        client_data_json=b64url(made_elsewhere.replace(ORIGIN.encode(), b"https://evil.example")),
    )
    with session_scope(stack.runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", drafts["params"])
        assert draft is not None
        bigger = {**draft.params, "amount": {"amount_minor": 70_000, "currency": "USD"}}
    tamper(stack.runtime.engine, drafts["params"], params=bigger)
    for name in ("assertion-signature", "ed25519-signature"):
        original = approval_of(stack, drafts[name]).signature
        flipped = original[:10] + ("A" if original[10] != "A" else "B") + original[11:]
        tamper_approval(stack, drafts[name], signature=flipped)

    worker = restart_worker(stack, stack_host)
    expected = {
        "authenticator-data": "did not verify the user",
        "client-data": "origin",
        "params": "params_sha256",
        "assertion-signature": "signature does not verify",
        "ed25519-signature": "the signature does not verify",
    }
    # All refused first: the chain is checked (in assert_refused_by_the_worker) once nothing
    # appends any more, never while the worker is still refusing the next one.
    for execution_id in executions.values():
        assert wait_for_execution(stack, execution_id)["status"] == "failed"
    for name, draft_id in drafts.items():
        execution = assert_refused_by_the_worker(stack, draft_id, executions[name], worker)
        assert expected[name] in execution.error["message"], (name, execution.error)
