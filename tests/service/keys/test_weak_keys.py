"""Weak Ed25519 public keys are refused wherever a key enters (DESIGN.md §12): enrolment
(POST /v1/me/key-enrolments), admin registration (POST /v1/admin/keys), `draftgate keys
register`, the approval of an enrolment written before the rule existed, and the core use
case the demo seed goes through. Each API refusal is a 400 WEAK_PUBLIC_KEY problem, audited
as ``<route>.refused``, and nothing is stored.

BUG (before issue 17): all eight small-order encodings (the identity
``AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA`` among them) were accepted with 201: any
32 bytes were "a usable Ed25519 public key". Every test here fails on that code.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlmodel import Session, col, select

from service.api.app import create_app
from service.audit.models import AuditEvent
from service.db import session_scope
from service.errors import DomainError
from service.keys import actions as keys
from service.keys.models import ApproverKey, CredentialKind, EnrolmentStatus, KeyEnrolment
from service.signing import b64url, key_id_for
from service.sql import utcnow
from tests.service import ed25519_cases as curve
from tests.support import cli
from tests.support.api_client import bearer, in_process

SMALL_ORDER = [b64url(raw) for raw in curve.small_order_encodings()]
OTHER_WEAK = [
    pytest.param(b64url(curve.non_canonical_encodings()[2]), id="identity-as-y-plus-p"),
    pytest.param(b64url(curve.non_canonical_encodings()[-1]), id="minus-zero"),
    pytest.param(
        b64url(curve.encode(curve.add(curve.mul(0xC0FFEE, curve.BASE), curve.T8))),
        id="mixed-order",
    ),
]
WEAK = [pytest.param(key, id=f"small-order-{i}") for i, key in enumerate(SMALL_ORDER)] + OTHER_WEAK


@pytest.fixture
def db_url(sqlite_url: str) -> str:  # the rule does not depend on the database
    return sqlite_url


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


def last_event(runtime) -> AuditEvent:
    with Session(runtime.engine) as session:
        event = session.scalars(select(AuditEvent).order_by(col(AuditEvent.seq).desc())).first()
        assert event is not None
        return event


def stored(runtime, model: Any) -> list[Any]:
    with Session(runtime.engine) as session:
        return list(session.scalars(select(model)).all())


def assert_weak_key_problem(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["code"] == "WEAK_PUBLIC_KEY"
    assert problem["category"] == "invalid_argument"
    assert "small-order" in problem["detail"]  # why, for the person who sent it
    assert "forged" in problem["detail"]
    assert problem["suggested_action"]
    return problem


def assert_refusal_audited(runtime, operation: str) -> None:
    event = last_event(runtime)
    assert event.type == f"{operation}.refused"
    assert event.data["error"]["code"] == "WEAK_PUBLIC_KEY"


@pytest.mark.parametrize("public_key", WEAK)
def test_a_weak_key_is_refused_at_enrolment(api, runtime, demo, public_key):
    before = stored(runtime, KeyEnrolment)

    response = api.post(
        "/v1/me/key-enrolments",
        json={"public_key": public_key, "label": "browser"},
        headers=bearer(demo["tokens"]["approver_alice"]),
    )

    assert_weak_key_problem(response)
    assert_refusal_audited(runtime, "key.enrolment")
    assert stored(runtime, KeyEnrolment) == before


@pytest.mark.parametrize("public_key", WEAK)
def test_a_weak_key_is_refused_at_admin_registration(api, runtime, demo, public_key):
    response = api.post(
        "/v1/admin/keys",
        json={"approver": "bob", "public_key": public_key, "label": "spare"},
        headers=bearer(demo["tokens"]["admin"]),
    )

    assert_weak_key_problem(response)
    assert_refusal_audited(runtime, "admin.key_register")
    assert key_id_for(public_key) not in {key.key_id for key in stored(runtime, ApproverKey)}


def test_a_weak_enrolment_written_before_the_rule_is_refused_when_an_admin_approves_it(
    api, runtime, demo
):
    """An enrolment stored by the old code (or behind the API's back) never becomes a key."""
    identity = SMALL_ORDER[0]
    enrolment_id = "enr_" + secrets.token_hex(12)
    with session_scope(runtime.engine) as session:
        session.add(
            KeyEnrolment(
                id=enrolment_id,
                tenant="demo",
                approver="alice",
                kind=CredentialKind.ED25519,
                key_id=key_id_for(identity),
                label="old",
                material={"public_key": identity},
                status=EnrolmentStatus.PENDING,
                created_at=utcnow(),
            )
        )

    response = api.post(
        f"/v1/admin/key-enrolments/{enrolment_id}/approve",
        headers=bearer(demo["tokens"]["admin"]),
    )

    assert_weak_key_problem(response)
    assert_refusal_audited(runtime, "admin.enrolment_approve")
    assert key_id_for(identity) not in {key.key_id for key in stored(runtime, ApproverKey)}
    [enrolment] = [e for e in stored(runtime, KeyEnrolment) if e.id == enrolment_id]
    assert enrolment.status is EnrolmentStatus.PENDING  # rolled back with the refusal


@pytest.mark.parametrize("public_key", [SMALL_ORDER[0], OTHER_WEAK[2].values[0]])
def test_a_weak_key_is_refused_by_keys_register(runtime, demo, public_key):
    env = cli.operator_env(runtime)
    env["DRAFTGATE_DEFAULT_TENANT"] = "demo"

    result = cli.run("keys", "register", "--approver", "alice", "--public-key", public_key, env=env)

    assert result.exit_code == 1, result.stdout
    assert "error: WEAK_PUBLIC_KEY: This public key is refused" in result.stderr
    assert key_id_for(public_key) not in {key.key_id for key in stored(runtime, ApproverKey)}


@pytest.mark.parametrize("public_key", WEAK)
def test_the_core_use_case_every_entry_shares_refuses_a_weak_key(runtime, demo, public_key):
    """keys.register: the one entry of the API, the CLI, enrolment approval and the demo seed."""
    with pytest.raises(DomainError) as refused, session_scope(runtime.engine) as session:
        keys.register(
            session, tenant="demo", approver="alice", public_key=public_key, actor="operator:t"
        )

    assert refused.value.code == "WEAK_PUBLIC_KEY"
