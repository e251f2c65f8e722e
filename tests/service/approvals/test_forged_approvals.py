"""The forged approval of issue 17, refused at approval, at the execute gate and by the worker's
code; each refusal audited.

The attacker holds alice's bearer token and can write to the database (both in the threat
model), but no private key. They plant a small-order public key for alice, such as the
identity ``AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA``, and sign statements with a small-order
R and S = 0: for such a key that "verifies" under a lax (cofactorless, OpenSSL) verifier.

BUG (before issue 17): the API accepted the forged approval (201) and the worker executed
the refund. The worker here is the worker's own code, in-process (``runner.run_execution``);
tests/workers/test_forged_approvals.py repeats the end of the story against a real worker.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlmodel import Session, select

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.models import Approval
from service.approvals.schemas import Decision, statement_for
from service.canonical import canonical_json
from service.db import session_scope
from service.drafts.models import Draft, DraftStatus
from service.executions import runner
from service.executions.models import Execution
from service.keys.models import ApproverKey
from service.shop.models import Refund
from service.signing import b64url, b64url_decode, key_id_for
from service.sql import rfc3339_seconds, utcnow
from tests.service import ed25519_cases as curve
from tests.service.api.test_approvals_api import (
    assert_refused,
    events,
    execute,
    post_approval,
    propose,
    snapshot,
    token,
)
from tests.support.api_client import get_draft, in_process

IDENTITY = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
SMALL_ORDER = [b64url(raw) for raw in curve.small_order_encodings()]


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def plant_key(runtime, public_key: str, approver: str = "alice") -> str:
    """Write a key row straight into the database, as someone with write access would."""
    key_id = key_id_for(public_key)
    with session_scope(runtime.engine) as session:
        session.add(
            ApproverKey(
                key_id=key_id,
                tenant="demo",
                approver=approver,
                public_key=public_key,
                label="planted",
                created_at=utcnow(),
            )
        )
    return key_id


def forge(draft: dict[str, Any], public_key: str) -> tuple[dict[str, Any], str]:
    """A statement over ``draft`` and a signature with small-order R and S = 0 that a lax
    verifier accepts under the small-order ``public_key``: R = -[k]A, found by trying each
    small-order R and, for keys of order 2 to 8, a few earlier ``issued_at`` seconds."""
    raw = b64url_decode(public_key)
    point = curve.decode_lenient(raw)
    assert point is not None
    now = utcnow()
    for seconds in range(120):
        statement = statement_for(
            draft,
            decision=Decision.APPROVE,
            approver="alice",
            key_id=key_id_for(public_key),
            issued_at=rfc3339_seconds(now - timedelta(seconds=seconds)),
        )
        message = canonical_json(statement)
        for r_point in curve.SMALL_ORDER_POINTS:
            r = curve.encode(r_point)
            k = curve.k_of(r, raw, message) % 8  # A's order divides 8
            if curve.add(r_point, curve.mul(k, point)) == curve.IDENTITY:
                signature = r + bytes(32)
                # A real forgery: OpenSSL, which draftgate verified with before, accepts it.
                Ed25519PublicKey.from_public_bytes(raw).verify(signature, message)
                return statement, b64url(signature)
    raise AssertionError(f"no forgery found for {public_key}")


def plant_forged_approval(runtime, draft_id: str, public_key: str) -> str:
    """The state the old code left behind: the forged approval under the (planted) key
    stored, the draft approved. Returns the approval's id."""
    key_id = key_id_for(public_key)
    approval_id = "apv_" + secrets.token_hex(12)
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        view = {
            "tenant": draft.tenant,
            "draft_id": draft.id,
            "revision": draft.revision,
            "action": draft.action,
            "contract_version": draft.contract_version,
            "params_sha256": draft.params_sha256,
            "source_revision": draft.source_revision,
        }
        statement, signature = forge(view, public_key)
        session.add(
            Approval(
                id=approval_id,
                tenant=draft.tenant,
                draft_id=draft.id,
                revision=draft.revision,
                approver="alice",
                key_id=key_id,
                decision=Decision.APPROVE,
                params_sha256=draft.params_sha256,
                statement=statement,
                signature=signature,
                created_at=utcnow(),
            )
        )
        draft.status = DraftStatus.APPROVED
        session.add(draft)
    return approval_id


def refunds(runtime) -> list[Refund]:
    with Session(runtime.engine) as session:
        return list(session.scalars(select(Refund)).all())


# --- at approval -------------------------------------------------------------------------


@pytest.mark.parametrize("public_key", SMALL_ORDER, ids=lambda key: f"A={key[:6]}")
def test_a_forged_approval_under_a_planted_small_order_key_is_refused(
    api, runtime, demo, door, public_key
):
    draft_id = propose(door)["draft_id"]
    plant_key(runtime, public_key)
    statement, signature = forge(get_draft(api, token(demo, "alice"), draft_id), public_key)
    before = snapshot(runtime, draft_id)

    response = post_approval(
        api, token(demo, "alice"), draft_id, {"statement": statement, "signature": signature}
    )

    problem = assert_refused(
        response, 400, "WEAK_PUBLIC_KEY", runtime=runtime, draft_id=draft_id, before=before
    )
    assert key_id_for(public_key) in problem["detail"]
    assert snapshot(runtime, draft_id).status == "proposed"


# --- at the execute gate and in the worker ------------------------------------------------


def test_a_stored_forged_approval_never_counts_at_the_gate(api, runtime, demo, door):
    draft_id = propose(door)["draft_id"]
    key_id = plant_key(runtime, IDENTITY)
    plant_forged_approval(runtime, draft_id, IDENTITY)

    refused = execute(api, token(demo, "alice"), draft_id)

    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["code"] == "APPROVALS_UNVERIFIED"
    assert problem["details"]["verified_approvers"] == []
    [why] = problem["details"]["problems"]
    assert "the signing key is weak and never counts" in why
    [audited] = [e for e in events(runtime, type="execution.refused") if e.draft_id == draft_id]
    assert audited.data["error"]["code"] == "APPROVALS_UNVERIFIED"
    # The draft view shows the approval as not counting, and why.
    [shown] = get_draft(api, token(demo, "alice"), draft_id)["approvals"]
    assert (shown["key_id"], shown["counts"]) == (key_id, False)
    assert "weak" in shown["problem"]
    assert refunds(runtime) == []


def test_the_worker_refuses_a_stored_forged_approval_queued_behind_the_apis_back(
    runtime, demo, door
):
    draft_id = propose(door)["draft_id"]
    plant_key(runtime, IDENTITY)
    plant_forged_approval(runtime, draft_id, IDENTITY)
    execution_id = "exe_" + secrets.token_hex(12)
    now = utcnow()
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        session.add(
            Execution(
                id=execution_id,
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
        )

    runner.run_execution(runtime, execution_id)

    with Session(runtime.engine) as session:
        execution = session.get(Execution, execution_id)
        assert execution is not None
        assert (execution.status, execution.outcome) == ("failed", None)
        assert execution.error is not None
        assert execution.error["code"] == "APPROVALS_UNVERIFIED"
        assert "the signing key is weak and never counts" in execution.error["message"]
    assert [e for e in events(runtime, type="execution.started") if e.draft_id == draft_id] == []
    [refused] = [
        e for e in events(runtime, type="security.execution_refused") if e.draft_id == draft_id
    ]
    assert refused.actor == "system:worker"
    assert refunds(runtime) == []
