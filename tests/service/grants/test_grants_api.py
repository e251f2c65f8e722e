"""The grant routes over HTTP (issue 21.1): the statement to sign in words, a signed grant
recorded once, listed with what it covered, revoked by its approver; every refusal a
structured problem, audited, with nothing recorded. A grant whose key is weak, or whose row
was edited in the database, never covers a draft and never runs one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import col, select

from harness.orders import Orders
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.schemas import signed_request
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import DraftStatus
from service.executions import runner
from service.grants.models import Grant
from service.signing import b64url, load_private_key
from service.sql import utcnow
from tests.service import ed25519_cases as curve
from tests.service.api.test_approvals_api import assert_problem
from tests.service.approvals.test_forged_approvals import IDENTITY, plant_key
from tests.service.executions.test_runner import propose_refund, state
from tests.service.grants.test_standing_grants import detail, settings_overrides  # noqa: F401
from tests.support.api_client import bearer, in_process
from tests.support.core import request_execution_in_core

TERMS = {
    "action": "refund",
    "currency": "USD",
    "max_amount_minor": 2_000,
    "cap_minor": 5_000,
    "cap_window_seconds": 86_400,
    "duration_seconds": 86_400,
}


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


def alice(demo: dict[str, Any]) -> dict[str, str]:
    return bearer(demo["tokens"]["approver_alice"])


def signed_grant(api: httpx.Client, demo: dict[str, Any], **terms: Any) -> dict[str, Any]:
    offered = api.post("/v1/grants/statement", json={**TERMS, **terms}, headers=alice(demo))
    assert offered.status_code == 200, offered.text
    key = load_private_key(Path(demo["approvers"]["alice"]["private_key_file"]))
    return signed_request(offered.json()["statement"], key)


def audited(runtime, type_: str) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(AuditEvent).where(col(AuditEvent.type) == type_)).all())


def test_an_approver_reads_the_grant_in_words_signs_it_lists_it_and_revokes_it(api, demo, runtime):
    offered = api.post("/v1/grants/statement", json=TERMS, headers=alice(demo)).json()
    assert offered["words"].startswith(
        "refund drafts up to 20.00 USD each, at most 50.00 USD a day, for 24 h from "
    )
    assert offered["statement"]["type"] == "draftgate.grant.v1"
    assert offered["statement"]["key_id"] == demo["approvers"]["alice"]["key_id"]
    key = load_private_key(Path(demo["approvers"]["alice"]["private_key_file"]))
    body = signed_request(offered["statement"], key)
    created = api.post("/v1/grants", json=body, headers=alice(demo))
    assert created.status_code == 201, created.text
    grant = created.json()
    assert (grant["grant_id"], grant["status"]) == (offered["grant_id"], "active")
    assert_problem(api.post("/v1/grants", json=body, headers=alice(demo)), 409, "GRANT_EXISTS")
    listed = api.get("/v1/grants", headers=bearer(demo["tokens"]["auditor"])).json()
    assert [g["grant_id"] for g in listed["grants"]] == [grant["grant_id"]]
    bob = bearer(demo["tokens"]["approver_bob"])
    revoke = f"/v1/grants/{grant['grant_id']}/revoke"
    assert_problem(api.post(revoke, headers=bob), 404, "GRANT_UNAVAILABLE")
    revoked = api.post(revoke, headers=alice(demo)).json()
    assert (revoked["status"], revoked["revoked_by"]) == ("revoked", "approver:alice")
    assert len(audited(runtime, "grant.created")) == len(audited(runtime, "grant.revoked")) == 1
    assert len(audited(runtime, "grants.create.refused")) == 1
    assert len(audited(runtime, "grants.revoke.refused")) == 1


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"approver": "bob"}, 403, "APPROVER_MISMATCH"),
        ({"tenant": "other"}, 409, "STATEMENT_MISMATCH"),
        ({"max_amount_minor": 200_000}, 403, "SIGNATURE_INVALID"),  # not what was signed
        ({"expires_at": "2020-01-01T00:00:00Z"}, 400, "INVALID_ARGUMENT"),  # before not_before
        ({"agent": None}, 400, "INVALID_ARGUMENT"),  # a signed null
        ({"extra": 1}, 400, "INVALID_ARGUMENT"),
        ({"issued_at": "2020-01-01T00:00:00Z"}, 409, "STATEMENT_STALE"),
        ({"action": "cancel_order"}, 403, "GRANT_NOT_ALLOWED"),
    ],
)
def test_a_grant_that_is_not_exactly_what_its_approver_signed_is_refused_and_audited(
    api, demo, runtime, change, status, code
):
    body = signed_grant(api, demo)
    body["statement"] = {**body["statement"], **change}
    assert_problem(api.post("/v1/grants", json=body, headers=alice(demo)), status, code)
    assert api.get("/v1/grants", headers=alice(demo)).json()["grants"] == []
    assert [e.data["error"]["code"] for e in audited(runtime, "grants.create.refused")] == [code]


def test_an_agent_can_neither_sign_nor_read_grants(api, demo):
    agent = bearer(demo["tokens"]["agent"])
    assert_problem(api.post("/v1/grants", json={}, headers=agent), 403, "PERMISSION_DENIED")
    assert_problem(api.get("/v1/grants", headers=agent), 403, "PERMISSION_DENIED")


def forged_grant(demo: dict[str, Any], api: httpx.Client, key_id: str) -> dict[str, Any]:
    """A grant statement under the planted identity key, with R the identity and S = 0: what a
    lax verifier accepts for that key over any message."""
    offered = api.post("/v1/grants/statement", json=TERMS, headers=alice(demo)).json()
    statement = {**offered["statement"], "key_id": key_id}
    return {"statement": statement, "signature": b64url(curve.encode(curve.IDENTITY) + bytes(32))}


def test_a_grant_under_a_planted_weak_key_is_refused_and_never_covers_if_planted_too(
    api, demo, runtime, door
):
    key_id = plant_key(runtime, IDENTITY)
    body = forged_grant(demo, api, key_id)
    assert_problem(api.post("/v1/grants", json=body, headers=alice(demo)), 400, "WEAK_PUBLIC_KEY")
    from service.grants.schemas import grant_id_of

    now = utcnow()
    statement = body["statement"]
    with session_scope(runtime.engine) as session:  # what database write access can do
        session.add(
            Grant(
                id=grant_id_of(statement),
                tenant="demo",
                action="refund",
                approver="alice",
                key_id=key_id,
                statement=statement,
                signature=body["signature"],
                scheme="ed25519",
                not_before=now.replace(year=2020),
                expires_at=now.replace(year=2099),
                created_at=now,
            )
        )
    draft = propose_refund(door, 1_000, Orders(runtime.engine, prefix=8).take(1)[0])
    view = detail(runtime, demo, draft)
    assert (view.status, view.approvals) == (DraftStatus.PROPOSED, [])


def test_a_grant_row_edited_in_the_database_covers_nothing_more_and_runs_nothing(
    api, demo, runtime, door
):
    created = api.post("/v1/grants", json=signed_grant(api, demo), headers=alice(demo)).json()
    orders = Orders(runtime.engine, prefix=9)
    covered = propose_refund(door, 1_000, orders.take(1)[0])
    execution_id = request_execution_in_core(runtime, demo, covered)[0].id
    with session_scope(runtime.engine) as session:  # raise the bound behind the API's back
        grant = session.get(Grant, created["grant_id"])
        assert grant is not None
        grant.statement = {**grant.statement, "max_amount_minor": 100_000}
    larger = propose_refund(door, 5_000, orders.take(1)[0])
    assert detail(runtime, demo, larger).status is DraftStatus.PROPOSED
    runner.run_execution(runtime, execution_id)
    execution = state(runtime, execution_id)[0]
    assert (execution.status, execution.error["code"]) == ("failed", "APPROVALS_UNVERIFIED")
    assert "not the one its id names" in str(execution.error)
