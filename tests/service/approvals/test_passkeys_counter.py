"""The sign counter under concurrency (PostgreSQL, where row locks are real): an approval
reads, compares and advances a passkey's counter under the passkey's row lock, so two
approvals carrying the same counter (a cloned authenticator used twice at once) cannot both
be accepted — the second waits for the first and then sees the counter already advanced."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import text

from mcp_adapter.tools import ToolDoor
from service.approvals import actions as approvals
from service.approvals.schemas import ApprovalRequest, Decision, statement_for
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.errors import DomainError
from service.keys import enrolments, passkeys
from service.keys import repository as keys_repository
from service.keys.schemas import PasskeyRegistrationRequest
from service.sql import rfc3339_seconds, utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from service.validation import parse
from tests.support.authenticator import SoftwareAuthenticator
from tests.support.backends import postgresql_only

RP_ID, ORIGIN = "localhost", "http://localhost:8000"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"webauthn_rp_id": RP_ID, "webauthn_origins": [ORIGIN]}


def register(runtime: Any, demo: dict[str, Any], authenticator: SoftwareAuthenticator) -> str:
    with session_scope(runtime.engine) as session:
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        options = passkeys.registration_options(
            session, alice, settings=runtime.settings, now=utcnow()
        ).options
        enrolment = enrolments.enrol_passkey(
            session,
            alice,
            settings=runtime.settings,
            request=PasskeyRegistrationRequest(credential=authenticator.create(options)),
            now=utcnow(),
        )
        enrolments.decide(
            session,
            enrolments.Decider(tenant="demo", actor="operator:test"),
            enrolment_id=enrolment.enrolment_id,
            approve=True,
            now=utcnow(),
        )
        return enrolment.key_id


def approval_body(
    runtime: Any, draft_id: str, key_id: str, authenticator: SoftwareAuthenticator
) -> ApprovalRequest:
    with session_scope(runtime.engine) as session:
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        shown = {
            "tenant": draft.tenant,
            "draft_id": draft.id,
            "revision": draft.revision,
            "action": draft.action,
            "contract_version": draft.contract_version,
            "params_sha256": draft.params_sha256,
            "source_revision": draft.source_revision,
        }
    statement = statement_for(
        shown,
        decision=Decision.APPROVE,
        approver="alice",
        key_id=key_id,
        issued_at=rfc3339_seconds(utcnow()),
    )
    return parse(ApprovalRequest, authenticator.approval(statement))


def lock_waiters(runtime: Any) -> int:
    with runtime.engine.connect() as connection:
        query = text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return int(connection.execute(query).scalar_one())


@postgresql_only
def test_an_approval_waits_for_the_passkeys_lock_and_sees_the_counter_advanced(runtime, demo):
    authenticator = SoftwareAuthenticator(rp_id=RP_ID, origin=ORIGIN)
    key_id = register(runtime, demo, authenticator)
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
    }
    draft_id = door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"]
    request = approval_body(runtime, draft_id, key_id, authenticator)  # counter 1
    outcome: dict[str, Any] = {}

    def approve() -> None:
        try:
            with session_scope(runtime.engine) as session:
                alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
                approvals.submit(
                    session,
                    alice,
                    runtime=runtime,
                    draft_id=draft_id,
                    request=request,
                    now=utcnow(),
                )
        except DomainError as error:
            outcome["code"] = error.code
        else:
            outcome["code"] = None

    # Another approval with counter 1 is being accepted: it holds the passkey's row.
    with session_scope(runtime.engine) as holder:
        passkey = keys_repository.get_passkey(holder, "demo", key_id, for_update=True)
        assert passkey is not None
        contender = threading.Thread(target=approve)
        contender.start()
        deadline = time.monotonic() + 30
        while lock_waiters(runtime) == 0:  # the contender is blocked on the row lock
            assert contender.is_alive(), outcome
            assert time.monotonic() < deadline, "the contender never waited for the lock"
            time.sleep(0.02)
        passkey.sign_count = 1
        holder.add(passkey)
    contender.join(timeout=60)

    assert outcome == {"code": "SIGN_COUNT_NOT_INCREASED"}
    with session_scope(runtime.engine) as session:
        stored = keys_repository.get_passkey(session, "demo", key_id)
        assert stored is not None
        assert stored.sign_count == 1
