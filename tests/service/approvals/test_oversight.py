"""Oversight (issue 21.4, docs/metrics.md "Oversight"): each signed decision is measured
(dwell from first view to signature, latency from proposal, whether the params and the
source were seen), an approver who signs ten drafts in a few seconds is flagged in the audit
log, and a draft waiting too long is escalated once, to the webhooks subscribed to it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col, select

from harness.orders import Orders
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals import oversight
from service.approvals.models import DraftReview
from service.audit.models import AuditEvent
from service.config import DEFAULT_POLICIES
from service.db import session_scope
from service.drafts.models import Draft
from service.executions import sweeper
from service.sql import utcnow
from service.tokens import actions as tokens
from service.webhooks import actions as webhooks
from service.webhooks.models import WebhookDelivery
from tests.service.executions.test_runner import propose_refund
from tests.support.api_client import bearer, in_process
from tests.support.backends import both_backends
from tests.support.core import approve_in_core, reject_in_core
from tests.support.prometheus import samples_of, value

pytestmark = both_backends

WATCH = {"min_dwell_seconds": 5, "flag_after": 5, "window_seconds": 600}


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    refund = {**DEFAULT_POLICIES["refund"], "oversight": {**WATCH, "escalate_after_seconds": 60}}
    return {"policies": {**DEFAULT_POLICIES, "refund": refund}}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def events(runtime, type_: str) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == type_)
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def test_ten_approvals_in_a_few_seconds_raise_a_rubber_stamp_flag(runtime, demo, door):
    orders = Orders(runtime.engine, prefix=1).take(10)
    for order in orders:  # each approved at once, never opened
        approve_in_core(runtime, demo, propose_refund(door, 1_000, order))

    flags = events(runtime, "oversight.flagged")
    assert [f.data["hasty_decisions"] for f in flags] == [5, 5]  # each since the last flag
    assert {(f.actor, f.data["approver"]) for f in flags} == {("system:oversight", "alice")}
    approved = events(runtime, "approval.approved")
    assert len(approved) == 10
    assert all(e.data["oversight"]["hasty"] for e in approved)
    assert all(e.data["oversight"]["dwell_ms"] is None for e in approved)


def test_a_decision_after_reading_is_measured_and_not_hasty(api, runtime, demo, door):
    draft_id = propose_refund(door, 1_000, Orders(runtime.engine, prefix=2).take(1)[0])
    alice = bearer(demo["tokens"]["approver_alice"])
    seen = api.post(
        f"/v1/drafts/{draft_id}/views", json={"revision": 1, "seen": ["params"]}, headers=alice
    )
    assert seen.status_code == 204, seen.text
    stale = api.post(f"/v1/drafts/{draft_id}/views", json={"revision": 2}, headers=alice)
    assert stale.status_code == 204  # a revision that is not current records nothing
    with session_scope(runtime.engine) as session:  # the approver read for 12 s
        session.execute(
            update(DraftReview)
            .where(col(DraftReview.draft_id) == draft_id)
            .values(first_viewed_at=utcnow() - timedelta(seconds=12))
        )

    approve_in_core(runtime, demo, draft_id)

    [approved] = events(runtime, "approval.approved")
    care = approved.data["oversight"]
    assert care["dwell_ms"] >= 12_000
    assert (care["hasty"], care["params_seen"], care["source_seen"]) == (False, True, False)
    assert care["latency_ms"] >= 0
    scraped = samples_of(api.get("/metrics").text)
    assert (
        value(scraped, "draftgate_review_dwell_seconds_count", action="refund", decision="approve")
        >= 1
    )
    agent = bearer(demo["tokens"]["agent"])
    refused = api.post(f"/v1/drafts/{draft_id}/views", json={"revision": 1}, headers=agent)
    assert refused.status_code == 403


def test_a_draft_waiting_past_its_slo_is_escalated_once_to_the_webhooks(runtime, demo, door):
    with session_scope(runtime.engine) as session:  # the second group's receiver
        admin = tokens.authenticate(session, demo["tokens"]["admin"])
        webhooks.create(
            session,
            admin,
            runtime=runtime,
            body={"url": "https://93.184.215.14/second-group", "events": ["draft.escalated"]},
            now=utcnow(),
        )
    draft_id = propose_refund(door, 1_000, Orders(runtime.engine, prefix=3).take(1)[0])
    with session_scope(runtime.engine) as session:  # proposed two minutes ago
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(created_at=utcnow() - timedelta(minutes=2))
        )

    first = sweeper.sweep(runtime, lambda task, args: None)
    again = sweeper.sweep(runtime, lambda task, args: None)

    assert (first.escalated, again.escalated) == (1, 0)
    [escalated] = events(runtime, "draft.escalated")
    assert escalated.draft_id == draft_id
    with session_scope(runtime.engine) as session:
        deliveries = session.exec(select(WebhookDelivery)).all()
    assert [d.event_type for d in deliveries] == ["draft.escalated"]


def test_drafts_escalated_long_ago_never_crowd_out_newer_ones(runtime, demo, door, monkeypatch):
    monkeypatch.setattr(oversight, "ESCALATE_BATCH", 2)  # a small page, to fill it
    drafts = [
        propose_refund(door, 1_000, order) for order in Orders(runtime.engine, prefix=6).take(3)
    ]
    with session_scope(runtime.engine) as session:
        for age, draft_id in enumerate(drafts):
            session.execute(
                update(Draft)
                .where(col(Draft.id) == draft_id)
                .values(created_at=utcnow() - timedelta(minutes=10 - age))
            )
    sweeps = [sweeper.sweep(runtime, lambda task, args: None).escalated for _ in range(3)]
    assert sweeps == [2, 1, 0]
    assert {e.draft_id for e in events(runtime, "draft.escalated")} == set(drafts)


def test_quick_rejections_are_never_hasty(runtime, demo, door):
    for order in Orders(runtime.engine, prefix=7).take(5):
        reject_in_core(runtime, demo, propose_refund(door, 1_000, order), "not this one")
    assert events(runtime, "oversight.flagged") == []
    rejected = events(runtime, "approval.rejected")
    assert [e.data["oversight"]["hasty"] for e in rejected] == [False] * 5
