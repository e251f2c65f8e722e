"""Outgoing webhooks through the API and the core, against a real receiver on 127.0.0.1.

Admin routes run in-process (ASGI); deliveries are made by the core's own ``deliver`` (what
the worker task calls) over real HTTP to a real server that verifies every signature with
``standardwebhooks``. The worker and beat wiring is proven in
tests/workers/test_webhook_delivery.py. Every test runs on SQLite; those where the database
decides (endpoints and deliveries stored, claimed under a lease, published after commit,
scoped by tenant, read back for a trace) on PostgreSQL too (``both_backends``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.audit import actions as audit_actions
from service.audit.models import AuditEvent
from service.db import session_scope
from service.executions.runner import run_execution
from service.sql import utcnow
from service.tracing import new_trace_id
from service.webhooks import crypto
from service.webhooks.delivery import deliver
from service.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from service.webhooks.outbox import publish_due
from service.webhooks.schemas import DELIVER_TASK, EVENT_TYPES, WEBHOOK_EVENT_FOR
from tests.service.webhooks.receiver import receiving, refused_url
from tests.support.api_client import bearer, in_process
from tests.support.backends import both_backends
from tests.support.core import approve_in_core, request_execution_in_core

ORDER = "ORD-1004"
REASON = "damaged"
NOTE = "Customer Ada says the parcel was crushed; call +447700900123"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {
        "webhook_max_attempts": 3,
        "webhook_retry_base_seconds": 0.05,
        "webhook_retry_max_seconds": 0.2,
        "webhook_timeout_seconds": 0.5,
        "api_public_url": "https://draftgate.example",
        # The receivers here listen on 127.0.0.1; refused by default (tested below).
        "webhook_allow_private_addresses": True,
    }


class Published:
    """The API's publisher, recording what it would hand the broker (the worker test sends
    through the real one)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str]]] = []

    def __call__(self, task: str, args: list[str]) -> None:
        self.messages.append((task, args))


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def api(runtime, demo, published) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime, publisher=published)) as client:
        yield client


def admin(demo: dict[str, Any]) -> dict[str, str]:
    return bearer(demo["tokens"]["admin"])


def add_endpoint(
    api: httpx.Client, demo: dict[str, Any], url: str, events: list[str] | None = None
) -> dict[str, Any]:
    response = api.post(
        "/v1/webhooks",
        json={"url": url, "events": events or list(EVENT_TYPES), "description": "on-call"},
        headers=admin(demo),
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def propose(runtime, demo, amount_minor: int = 2_500) -> str:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": REASON,
        "note": NOTE,
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def deliveries(runtime, **where: Any) -> list[WebhookDelivery]:
    with session_scope(runtime.engine) as session:
        statement = select(WebhookDelivery).order_by(col(WebhookDelivery.created_at))
        for name, value in where.items():
            statement = statement.where(getattr(WebhookDelivery, name) == value)
        return list(session.exec(statement).all())


def events_of(runtime, prefix: str) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = (
            select(AuditEvent)
            .where(col(AuditEvent.type).startswith(prefix))
            .order_by(col(AuditEvent.seq))
        )
        return list(session.exec(statement).all())


def deliver_all_due(runtime, *, rounds: int = 20) -> None:
    """Play the worker: attempt every pending delivery until none is left (waiting out the
    short backoffs these tests configure)."""
    for _ in range(rounds):
        pending = deliveries(runtime, status=DeliveryStatus.PENDING)
        if not pending:
            return
        for delivery in pending:
            wait_until_due(runtime, delivery.id)
            deliver(runtime, delivery.id)
    raise AssertionError("deliveries still pending")


def wait_until_due(runtime, delivery_id: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        (delivery,) = deliveries(runtime, id=delivery_id)
        if delivery.next_attempt_at <= utcnow() or delivery.status is not DeliveryStatus.PENDING:
            return
        assert time.monotonic() < deadline
        time.sleep(0.02)


def set_next_attempt(runtime, delivery_id: str, moment) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(
            update(WebhookDelivery)
            .where(col(WebhookDelivery.id) == delivery_id)
            .values(next_attempt_at=moment)
        )


def full_flow(runtime, demo) -> tuple[str, str]:
    draft_id = propose(runtime, demo)
    approve_in_core(runtime, demo, draft_id)
    execution, created = request_execution_in_core(runtime, demo, draft_id)
    assert created
    assert run_execution(runtime, execution.id).status == "succeeded"
    return draft_id, execution.id


# --- the admin routes ----------------------------------------------------------------------


@both_backends
def test_an_admin_adds_an_endpoint_and_is_shown_its_secret_once(api, runtime, demo):
    created = add_endpoint(api, demo, "https://hooks.example/T0/B0/sekret-path?token=abc")

    listed = api.get("/v1/webhooks", headers=admin(demo)).json()

    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert created["events"] == list(EVENT_TYPES)
    assert [e["endpoint_id"] for e in listed["endpoints"]] == [created["endpoint_id"]]
    assert "secret" not in listed["endpoints"][0]
    assert secret not in json.dumps(listed)
    with session_scope(runtime.engine) as session:
        row = session.get(WebhookEndpoint, created["endpoint_id"])
        assert row is not None
        assert secret not in row.sealed_secret
        assert secret.removeprefix("whsec_") not in row.sealed_secret
    (event,) = events_of(runtime, "webhook.created")
    assert event.actor == "admin:root"
    assert event.data["origin"] == "https://hooks.example"
    recorded = json.dumps(event.data)
    assert "sekret-path" not in recorded
    assert "token=abc" not in recorded
    assert secret not in recorded


@pytest.mark.parametrize(
    ("url", "events", "code"),
    [
        ("http://hooks.example/x", None, "WEBHOOK_URL_REFUSED"),
        ("ftp://127.0.0.1/x", None, "WEBHOOK_URL_REFUSED"),
        ("https://user:pw@hooks.example/x", None, "WEBHOOK_URL_REFUSED"),
        ("https:///no-host", None, "WEBHOOK_URL_REFUSED"),
        ("https://hooks.example/x#part", None, "WEBHOOK_URL_REFUSED"),
        ("https://hooks.example/a b", None, "WEBHOOK_URL_REFUSED"),
        ("https://hooks.example:99999/x", None, "WEBHOOK_URL_REFUSED"),
        ("http://10.0.0.1/x", None, "WEBHOOK_URL_REFUSED"),
        # Link-local (cloud metadata), multicast, unspecified: refused even when private
        # addresses are allowed, also inside IPv4-mapped and 6to4 IPv6 forms.
        ("https://169.254.169.254/latest/meta-data", None, "WEBHOOK_URL_REFUSED"),
        ("https://[::ffff:169.254.169.254]/x", None, "WEBHOOK_URL_REFUSED"),
        ("https://[2002:a9fe:a9fe::]/x", None, "WEBHOOK_URL_REFUSED"),
        ("https://[fe80::1]/x", None, "WEBHOOK_URL_REFUSED"),
        ("https://224.0.0.1/x", None, "WEBHOOK_URL_REFUSED"),
        ("https://0.0.0.0/x", None, "WEBHOOK_URL_REFUSED"),
        # A look-alike host must be given in punycode.
        ("https://p\u0430ypal.example/x", None, "WEBHOOK_URL_REFUSED"),
        (
            "https://hooks.example/x",
            ["draft.proposed", "webhook.delivered"],
            "WEBHOOK_EVENT_UNKNOWN",
        ),
        ("https://hooks.example/x", [], "INVALID_ARGUMENT"),
    ],
)
def test_a_url_or_event_draftgate_will_not_send_to_is_refused(
    api, runtime, demo, url, events, code
):
    body = {"url": url, "events": list(EVENT_TYPES) if events is None else events}

    response = api.post("/v1/webhooks", json=body, headers=admin(demo))

    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == code
    with session_scope(runtime.engine) as session:
        assert session.exec(select(WebhookEndpoint)).all() == []
    (refusal,) = events_of(runtime, "webhooks.create.refused")
    assert refusal.data["error"]["code"] == code


def test_http_is_accepted_for_loopback_only(api, demo):
    for url in ("http://127.0.0.1:9/x", "http://[::1]:9/x", "http://localhost:9/x"):
        assert add_endpoint(api, demo, url)["url"] == url


@pytest.mark.parametrize("role", ["approver_alice", "auditor", "agent"])
def test_only_admins_manage_webhooks_and_every_refusal_is_audited(api, runtime, demo, role):
    endpoint = add_endpoint(api, demo, "https://hooks.example/x")
    headers = bearer(demo["tokens"][role])
    path = f"/v1/webhooks/{endpoint['endpoint_id']}"
    calls = [
        ("POST", "/v1/webhooks", {"url": "https://evil.example/x", "events": ["draft.proposed"]}),
        ("GET", "/v1/webhooks", None),
        ("DELETE", path, None),
        ("POST", f"{path}/test", None),
        ("GET", f"{path}/deliveries", None),
    ]

    answers = [api.request(m, p, json=b, headers=headers) for m, p, b in calls]

    assert [a.status_code for a in answers] == [403] * len(calls), [a.text for a in answers]
    with session_scope(runtime.engine) as session:
        assert len(session.exec(select(WebhookEndpoint)).all()) == 1
    refused = [e for e in events_of(runtime, "webhooks.") if e.type.endswith(".refused")]
    assert sorted(e.type for e in refused) == [
        "webhooks.create.refused",
        "webhooks.deliveries.refused",
        "webhooks.list.refused",
        "webhooks.remove.refused",
        "webhooks.test.refused",
    ]
    assert {e.data["error"]["code"] for e in refused} == {"PERMISSION_DENIED"}


@both_backends
def test_remove_stops_deliveries_and_an_unknown_id_is_unavailable(api, runtime, demo):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url)
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)  # pending, never attempted
        removed = api.delete(f"/v1/webhooks/{endpoint['endpoint_id']}", headers=admin(demo))
        again = api.delete(f"/v1/webhooks/{endpoint['endpoint_id']}", headers=admin(demo))
        other = propose(runtime, demo, amount_minor=2_400)  # announced to nobody now
        deliver_all_due(runtime)

    assert removed.status_code == 200
    assert removed.json()["active"] is False
    assert again.status_code == 404
    assert again.json()["code"] == "WEBHOOK_UNAVAILABLE"
    assert receiver.count() == 0
    (only,) = deliveries(runtime)
    assert only.status is DeliveryStatus.FAILED
    assert only.last_error == "the endpoint was removed"
    assert other not in {d.draft_id for d in deliveries(runtime)}
    assert api.get("/v1/webhooks", headers=admin(demo)).json()["endpoints"] == []
    log = api.get(f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries", headers=admin(demo))
    assert log.status_code == 200
    assert log.json()["deliveries"][0]["status"] == "failed"


# --- delivery: the flow's events, signed, once each ----------------------------------------


@both_backends
def test_each_event_of_a_flow_creates_its_delivery_in_the_same_transaction(api, runtime, demo):
    add_endpoint(api, demo, "https://hooks.example/x")

    draft_id = propose(runtime, demo)

    (delivery,) = deliveries(runtime)  # committed with the proposal, by the MCP door's unit
    (proposed,) = events_of(runtime, "draft.proposed")
    assert (delivery.event_type, delivery.draft_id) == ("draft.proposed", draft_id)
    assert delivery.audit_seq == proposed.seq
    assert delivery.occurred_at == proposed.at


@both_backends
def test_the_sweep_publishes_a_pending_delivery_once_until_its_republish_time(api, runtime, demo):
    """What beat's ``publish_due`` selects is a timestamp comparison in SQL (republish_at
    against now), which each backend stores in its own way."""
    add_endpoint(api, demo, "https://hooks.example/x")
    propose(runtime, demo)
    (delivery,) = deliveries(runtime)
    sent: list[tuple[str, list[str]]] = []

    def publish(task: str, args: list[str]) -> None:
        sent.append((task, args))

    assert publish_due(runtime.engine, publish, republish_after=60) == 1
    assert publish_due(runtime.engine, publish, republish_after=60) == 0  # not due again yet
    assert [args for _, args in sent] == [[delivery.id]]


@both_backends
def test_a_flow_reaches_a_real_receiver_signed_once_per_event_without_pii(api, runtime, demo):
    with receiving(["fail", "ok"]) as receiver:  # the first attempt fails: one retry
        endpoint = add_endpoint(api, demo, receiver.url)
        receiver.secret = endpoint["secret"]
        draft_id, execution_id = full_flow(runtime, demo)
        deliver_all_due(runtime)

    # The retried one arrives last: receivers order by the event, not by arrival.
    events = sorted(receiver.verified_events(), key=lambda e: e["data"]["audit_seq"])
    assert [e["type"] for e in events] == [
        "draft.proposed",
        "draft.approved",
        "execution.succeeded",
    ]
    assert receiver.count() == 4  # one retried, deduplicated by webhook-id
    assert all(a.verified for a in receiver.arrivals)
    ids = [a.headers["webhook-id"] for a in receiver.arrivals]
    assert ids[0] == ids[-1]  # the same webhook-id on the retry
    assert len(set(ids)) == 3
    proposed, approved, succeeded = (e["data"] for e in events)
    assert proposed == {
        "tenant": "demo",
        "draft_id": draft_id,
        "execution_id": None,
        "revision": 1,
        "action": "refund",
        "status": "proposed",
        "audit_seq": proposed["audit_seq"],
        "occurred_at": events[0]["timestamp"],
        "url": f"https://draftgate.example/console/drafts/{draft_id}",
    }
    assert approved["status"] == "approved"
    assert (succeeded["execution_id"], succeeded["status"]) == (execution_id, "succeeded")
    received = receiver.all_bytes()
    for private in (REASON, "Ada", "+447700900123", ORDER, "2500", "USD", "support-agent"):
        assert private.encode() not in received, private
    assert endpoint["secret"].encode() not in received


def test_a_revision_is_announced_as_proposed_and_a_rejection_as_rejected(api, runtime, demo):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed", "draft.rejected"])
        receiver.secret = endpoint["secret"]
        door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
        first = propose(runtime, demo)
        door.call(
            "propose_refund",
            {
                "draft_id": first,
                "order_id": ORDER,
                "amount": {"amount_minor": 2_000, "currency": "USD"},
                "reason": REASON,
            },
            new_trace_id(),
            None,
        )
        _reject(runtime, demo, first)
        deliver_all_due(runtime)

    statuses = [(e["type"], e["data"]["revision"]) for e in receiver.verified_events()]
    assert statuses == [("draft.proposed", 1), ("draft.proposed", 2), ("draft.rejected", 2)]


def _reject(runtime, demo, draft_id: str) -> None:
    from harness.approvals import signed_decision
    from service.approvals import actions as approvals
    from service.approvals.schemas import ApprovalRequest, Decision
    from service.drafts import repository as drafts_repository
    from service.tokens import actions as tokens
    from service.validation import parse

    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        fields = ("tenant", "revision", "action", "contract_version", "params_sha256")
        fields += ("source_revision",)
        body = signed_decision(
            {"draft_id": draft.id, **{name: getattr(draft, name) for name in fields}},
            approver="alice",
            key_file=demo["approvers"]["alice"]["private_key_file"],
            decision=Decision.REJECT,
            reason="not this one",
        )
        approvals.submit(
            session,
            principal,
            draft_id=draft_id,
            request=parse(ApprovalRequest, body),
            runtime=runtime,
            now=utcnow(),
        )


def test_an_endpoint_gets_only_the_events_it_subscribed_to(api, runtime, demo):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["execution.succeeded"])
        receiver.secret = endpoint["secret"]
        full_flow(runtime, demo)
        deliver_all_due(runtime)

    assert [e["type"] for e in receiver.verified_events()] == ["execution.succeeded"]


def test_delivery_outcomes_are_audited_and_never_announced_themselves(api, runtime, demo):
    assert not any(audit_type.startswith("webhook") for audit_type in WEBHOOK_EVENT_FOR)
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url)
        receiver.secret = endpoint["secret"]
        full_flow(runtime, demo)
        deliver_all_due(runtime)
        deliver_all_due(runtime)  # nothing new: the outcomes announced nothing

    assert len(deliveries(runtime)) == 3
    delivered = events_of(runtime, "webhook.delivered")
    assert len(delivered) == 3
    assert {e.data["status_code"] for e in delivered} == {204}
    assert all(isinstance(e.data["latency_ms"], int) for e in delivered)
    with session_scope(runtime.engine) as session:
        assert audit_actions.verify(session, "demo").ok


# --- failing, slow and misbehaving receivers ------------------------------------------------


@both_backends
def test_a_failing_receiver_is_retried_with_backoff_then_marked_failed(api, runtime, demo):
    with receiving("fail") as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed"])
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)
        (delivery,) = deliveries(runtime)
        first = deliver(runtime, delivery.id)
        # A duplicate message before the backoff is over makes no attempt.
        set_next_attempt(runtime, delivery.id, utcnow() + timedelta(hours=1))
        early = deliver(runtime, delivery.id)
        set_next_attempt(runtime, delivery.id, utcnow())
        deliver_all_due(runtime)

    assert (first.status, first.retry_in) == ("pending", 0.05)
    assert (early.status, early.retry_in) == ("pending", None)
    assert receiver.count() == 3
    (failed,) = deliveries(runtime)
    assert failed.status is DeliveryStatus.FAILED
    assert failed.attempts == 3
    retries = events_of(runtime, "webhook.retry_scheduled")
    assert [e.data["retry_in_seconds"] for e in retries] == [0.05, 0.1]
    (given_up,) = events_of(runtime, "webhook.failed")
    assert (given_up.data["attempt"], given_up.data["status_code"]) == (3, 500)
    log = api.get(f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries", headers=admin(demo))
    (entry,) = log.json()["deliveries"]
    assert entry["status"] == "failed"
    assert entry["next_attempt_at"] is None
    assert [a["status_code"] for a in entry["attempts"]] == [500, 500, 500]
    # The receiver's answer is never read back: status code and latency only.
    assert "response_excerpt" not in entry["attempts"][0]
    assert "secret-looking reply" not in log.text


def test_a_refused_connection_is_retried_then_failed(api, runtime, demo):
    endpoint = add_endpoint(api, demo, refused_url(), ["draft.proposed"])
    propose(runtime, demo)

    deliver_all_due(runtime)

    (failed,) = deliveries(runtime)
    assert failed.status is DeliveryStatus.FAILED
    assert failed.attempts == 3
    assert failed.last_error is not None
    assert failed.last_error == "ConnectError"  # the class only: no errno text to scan with
    assert endpoint["endpoint_id"] == failed.endpoint_id


def test_a_slow_receiver_times_out(api, runtime, demo):
    with receiving("slow", delay=3) as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed"])
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)
        (delivery,) = deliveries(runtime)
        result = deliver(runtime, delivery.id)

    assert result.status == "pending"
    (attempted,) = deliveries(runtime)
    assert attempted.last_error == "ReadTimeout"
    assert attempted.last_status_code is None


def test_a_redirect_is_not_followed(api, runtime, demo):
    with receiving("redirect") as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed"])
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)
        deliver_all_due(runtime)

    assert receiver.count() == 3  # the receiver itself, each time; never the Location
    (failed,) = deliveries(runtime)
    assert failed.last_status_code == 302
    assert failed.last_error is not None
    assert "redirects are not followed" in failed.last_error


def test_a_secret_that_no_longer_opens_fails_the_delivery_clearly(api, runtime, demo):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed"])
        other_key = crypto.sealing_key(runtime.settings.state_dir / "another-secret-key")
        resealed = crypto.seal("whsec_AAAA", key=other_key, tenant="demo", endpoint_id="x")
        with session_scope(runtime.engine) as session:
            session.execute(
                update(WebhookEndpoint)
                .where(col(WebhookEndpoint.id) == endpoint["endpoint_id"])
                .values(sealed_secret=resealed)
            )
        propose(runtime, demo)
        deliver_all_due(runtime)

    assert receiver.count() == 0
    (failed,) = deliveries(runtime)
    assert failed.status is DeliveryStatus.FAILED
    assert failed.attempts == 0
    assert failed.last_error == "the secret does not open with this server's secret key"


@both_backends
def test_a_worker_that_died_mid_attempt_is_taken_over_after_its_lease(api, runtime, demo):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url, ["draft.proposed"])
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)
        (delivery,) = deliveries(runtime)
        with session_scope(runtime.engine) as session:  # an attempt claimed, then the worker died
            session.execute(
                update(WebhookDelivery)
                .where(col(WebhookDelivery.id) == delivery.id)
                .values(attempts=1, lease_expires_at=utcnow() + timedelta(minutes=5))
            )
        leased = deliver(runtime, delivery.id)
        sent_while_leased = receiver.count()
        with session_scope(runtime.engine) as session:
            session.execute(
                update(WebhookDelivery)
                .where(col(WebhookDelivery.id) == delivery.id)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )
        taken_over = deliver(runtime, delivery.id)

    assert (leased.status, sent_while_leased) == ("pending", 0)
    assert taken_over.status == "delivered"
    assert receiver.count() == 1
    (done,) = deliveries(runtime)
    assert done.attempts == 2


# --- the test ping, and secrets kept out of logs --------------------------------------------


@both_backends
def test_a_test_ping_is_published_after_commit_and_delivered_signed(api, runtime, demo, published):
    with receiving() as receiver:
        endpoint = add_endpoint(api, demo, receiver.url)
        receiver.secret = endpoint["secret"]
        queued = api.post(f"/v1/webhooks/{endpoint['endpoint_id']}/test", headers=admin(demo))
        deliver_all_due(runtime)

    assert queued.status_code == 202, queued.text
    delivery_id = queued.json()["delivery_id"]
    assert published.messages == [(DELIVER_TASK, [delivery_id])]
    (ping,) = receiver.verified_events()
    assert ping["type"] == "webhook.test"
    assert ping["data"] == {
        "tenant": "demo",
        "endpoint_id": endpoint["endpoint_id"],
        "status": "test",
        "occurred_at": ping["timestamp"],
    }
    assert receiver.arrivals[0].headers["webhook-id"] == delivery_id
    assert [e.type for e in events_of(runtime, "webhook.")] == [
        "webhook.created",
        "webhook.test_requested",
        "webhook.delivered",
    ]


def test_the_secret_never_reaches_logs_or_audit_data(api, runtime, demo, caplog):
    caplog.set_level(logging.DEBUG)
    with receiving(["fail", "ok"]) as receiver:
        endpoint = add_endpoint(api, demo, receiver.url)
        receiver.secret = endpoint["secret"]
        full_flow(runtime, demo)
        api.post(f"/v1/webhooks/{endpoint['endpoint_id']}/test", headers=admin(demo))
        deliver_all_due(runtime)

    secret = endpoint["secret"]
    raw = secret.removeprefix("whsec_")
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert secret not in logged
    assert raw not in logged
    assert "/hooks/draftgate" not in logged  # the URL's path may itself be a credential
    every_event = json.dumps([e.data for e in events_of(runtime, "")])
    assert raw not in every_event
    assert "/hooks/draftgate" not in every_event
    log = api.get(f"/v1/webhooks/{endpoint['endpoint_id']}/deliveries", headers=admin(demo))
    assert raw not in log.text


@both_backends
def test_another_tenants_admin_neither_sees_nor_touches_an_endpoint(api, runtime, demo):
    from service.principal import Role
    from service.tokens import actions as tokens

    endpoint = add_endpoint(api, demo, "https://hooks.example/x")
    with session_scope(runtime.engine) as session:
        other = tokens.issue(
            session, tenant="acme", subject="root", role=Role.ADMIN, actor="operator:test"
        ).token
    headers = bearer(other)
    path = f"/v1/webhooks/{endpoint['endpoint_id']}"

    listed = api.get("/v1/webhooks", headers=headers)
    answers = [
        api.delete(path, headers=headers),
        api.post(f"{path}/test", headers=headers),
        api.get(f"{path}/deliveries", headers=headers),
    ]
    propose(runtime, demo)  # a demo event: announced to demo's endpoint only

    assert listed.json() == {"endpoints": []}
    assert [a.status_code for a in answers] == [404, 404, 404]
    assert {a.json()["code"] for a in answers} == {"WEBHOOK_UNAVAILABLE"}
    (delivery,) = deliveries(runtime)
    assert (delivery.tenant, delivery.endpoint_id) == ("demo", endpoint["endpoint_id"])


@both_backends
def test_a_trace_with_failed_deliveries_still_reads(api, runtime, demo):
    from service.drafts.models import Draft

    add_endpoint(api, demo, refused_url(), ["draft.proposed"])
    draft_id = propose(runtime, demo)
    deliver_all_due(runtime)
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        trace_id = draft.trace_id

    response = api.get(f"/v1/traces/{trace_id}", headers=bearer(demo["tokens"]["auditor"]))

    assert response.status_code == 200, response.text
    types = [step["type"] for step in response.json()["steps"]]
    assert types.count("webhook.retry_scheduled") == 2
    assert types.count("webhook.failed") == 1


# --- where a webhook may point (SSRF) -------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hooks",
        "http://localhost:9/hooks",  # a name: resolved, and every address it has checked
        "https://10.0.0.1/x",
        "https://100.64.0.1/x",
        "https://[fd00::1]/x",
        "https://[::ffff:10.0.0.1]/x",
    ],
)
def test_loopback_and_private_addresses_are_refused_by_default(api, runtime, demo, url):
    strict = dataclasses.replace(
        runtime,
        settings=runtime.settings.model_copy(update={"webhook_allow_private_addresses": False}),
    )
    with in_process(create_app(strict)) as client:
        response = client.post(
            "/v1/webhooks", json={"url": url, "events": ["draft.proposed"]}, headers=admin(demo)
        )

    assert response.status_code == 400, response.text
    assert response.json()["code"] == "WEBHOOK_URL_REFUSED"
    assert "private address" in response.json()["detail"]


def test_each_delivery_checks_the_address_again_and_connects_to_the_one_checked(api, runtime, demo):
    with receiving() as receiver:
        pinned = receiver.url.replace("127.0.0.1", "localhost")
        endpoint = add_endpoint(api, demo, pinned, ["draft.proposed"])
        receiver.secret = endpoint["secret"]
        propose(runtime, demo)
        (delivery,) = deliveries(runtime)
        # Allowed when added; not any more when sent (a name re-pointed, a setting changed).
        strict = dataclasses.replace(
            runtime,
            settings=runtime.settings.model_copy(update={"webhook_allow_private_addresses": False}),
        )
        refused = deliver(strict, delivery.id)
        set_next_attempt(runtime, delivery.id, utcnow())
        sent = deliver(runtime, delivery.id)

    assert refused.status == "pending"
    assert sent.status == "delivered"
    (arrival,) = receiver.arrivals  # the refused attempt never connected
    # Dialled at the checked address, addressed to the name the admin gave.
    assert arrival.headers["host"] == pinned.split("/")[2]
    assert receiver.verified_events()[0]["type"] == "draft.proposed"
    attempts = events_of(runtime, "webhook.retry_scheduled")
    assert attempts[0].data["problem"] == "AddressRefused"
