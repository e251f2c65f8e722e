"""The console's credential routes (service/api/console/credentials.py), in-process.

The browser drives them end to end in test_approving.py; here are their refusals, which a
browser test would only slow down: wrong role, bad input, no CSRF token, no session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from sqlmodel import col, select

from service.api.app import create_app
from service.audit.models import AuditEvent
from service.db import session_scope
from service.keys.assertions import relying_party
from service.signing import generate_private_key, key_id_for, public_key_b64
from tests.service.console.console import CONSOLE_ORIGIN, post_json, signed_in
from tests.support.api_client import _PortalTransport


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # the routes only call the core; the core's tests cover PostgreSQL


@pytest.fixture
def client(runtime: Any, demo: dict[str, Any]) -> Iterator[httpx.Client]:
    """A cookie-keeping client of the console, as a browser is."""
    with (
        start_blocking_portal("asyncio") as portal,
        httpx.Client(
            transport=_PortalTransport(create_app(runtime), portal),
            base_url=CONSOLE_ORIGIN,
            timeout=60,
        ) as console,
    ):
        yield console


def audit_types(runtime: Any) -> list[str]:
    with session_scope(runtime.engine) as session:
        events = session.exec(select(AuditEvent).order_by(col(AuditEvent.seq))).all()
        return [event.type for event in events]


def test_an_approver_enrols_a_browser_key_and_sees_it_waiting(client, runtime, demo):
    csrf = signed_in(client, demo["tokens"]["approver_bob"])
    public_key = public_key_b64(generate_private_key())

    enrolled = post_json(
        client, "/console/credentials/enrolments", {"public_key": public_key}, csrf
    )
    assert enrolled.status_code == 201, enrolled.text
    assert enrolled.json()["key_id"] == key_id_for(public_key)
    assert enrolled.json()["status"] == "pending"
    assert "key.enrolment_requested" in audit_types(runtime)

    mine = client.get("/console/credentials").json()
    assert mine["approver"] == "bob"
    assert [e["key_id"] for e in mine["enrolments"]] == [key_id_for(public_key)]
    assert [k["key_id"] for k in mine["keys"]] == [demo["approvers"]["bob"]["key_id"]]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"public_key": "A" * 42}, "INVALID_ARGUMENT"),
        ({"public_key": public_key_b64(generate_private_key()), "admin": True}, "INVALID_ARGUMENT"),
        (["not", "an", "object"], "INVALID_ARGUMENT"),
    ],
)
def test_a_bad_enrolment_is_refused(client, runtime, demo, body, code):
    csrf = signed_in(client, demo["tokens"]["approver_bob"])
    refused = post_json(client, "/console/credentials/enrolments", body, csrf)
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == code
    assert "console.key_enrolment.refused" in audit_types(runtime)


def test_only_approvers_enrol_credentials(client, demo):
    csrf = signed_in(client, demo["tokens"]["auditor"])
    key = {"public_key": public_key_b64(generate_private_key())}
    refused = post_json(client, "/console/credentials/enrolments", key, csrf)
    assert refused.status_code == 403
    assert refused.json()["code"] == "PERMISSION_DENIED"
    assert post_json(client, "/console/credentials/passkeys/options", {}, csrf).status_code == 403


def test_enrolling_needs_the_csrf_token_and_a_session(client, demo):
    key = {"public_key": public_key_b64(generate_private_key())}
    anonymous = post_json(client, "/console/credentials/enrolments", key, None)
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "SESSION_REQUIRED"
    signed_in(client, demo["tokens"]["approver_bob"])
    no_token = post_json(client, "/console/credentials/enrolments", key, None)
    assert no_token.status_code == 403
    assert no_token.json()["code"] == "CSRF_REFUSED"


def test_passkey_options_require_user_verification_and_a_bad_registration_is_refused(
    client, runtime, demo
):
    csrf = signed_in(client, demo["tokens"]["approver_alice"])
    answer = post_json(client, "/console/credentials/passkeys/options", {}, csrf)
    assert answer.status_code == 200, answer.text
    options = answer.json()["options"]
    assert options["authenticatorSelection"]["userVerification"] == "required"
    assert options["rp"]["id"] == relying_party(runtime.settings).rp_id

    forged = {
        "credential": {
            "id": "AAAA",
            "rawId": "AAAA",
            "type": "public-key",
            "response": {"clientDataJSON": "e30", "attestationObject": "oA"},
        }
    }
    refused = post_json(client, "/console/credentials/passkeys", forged, csrf)
    assert refused.status_code in {400, 403, 409}, refused.text
    assert refused.json()["code"].startswith("PASSKEY_")
