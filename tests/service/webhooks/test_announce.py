"""Webhook deliveries are registered by the unit of work, explicitly, not by the audit chain.

The chain used to insert delivery rows as a side effect of appending events
(``chain._append`` called ``announce``): whoever appended, for whatever reason, wrote rows
of another domain without knowing it. Now the append returns what it appended, and the unit
of work (``session_scope``) hands that to ``announce``, whose rows are written by their
owner (service.webhooks.state).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlmodel import Session, select

from service.audit import chain
from service.db import session_scope
from service.sql import utcnow
from service.webhooks.announce import announce
from service.webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

CHAIN = Path(__file__).parents[3] / "service" / "audit" / "chain.py"


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # who writes the rows does not depend on the database


def subscribe(runtime) -> None:
    with session_scope(runtime.engine) as session:
        session.add(
            WebhookEndpoint(
                id="whk_1",
                tenant="demo",
                url="https://hooks.example/x",
                events=["draft.proposed"],
                sealed_secret="sealed",
                created_by="admin:root",
                created_at=utcnow(),
            )
        )


def proposed_event(session: Session) -> None:
    chain.record(
        session,
        chain.RecordedEvent(
            tenant="demo", actor="agent:a", type="draft.proposed", data={"revision": 1}
        ),
    )


def deliveries(runtime) -> list[WebhookDelivery]:
    with Session(runtime.engine) as session:
        return list(session.exec(select(WebhookDelivery)).all())


def test_appending_to_the_chain_writes_no_delivery_and_says_what_it_appended(runtime):
    subscribe(runtime)
    with Session(runtime.engine, expire_on_commit=False) as session:
        proposed_event(session)
        appended = chain.append_recorded(session)
        session.commit()

    assert [(e["tenant"], e["type"], e["seq"]) for e in appended] == [("demo", "draft.proposed", 1)]
    assert deliveries(runtime) == []


def test_the_caller_registers_the_deliveries_its_events_announce(runtime):
    subscribe(runtime)
    with Session(runtime.engine, expire_on_commit=False) as session:
        proposed_event(session)
        announce(session, chain.append_recorded(session))
        session.commit()

    [delivery] = deliveries(runtime)
    assert (delivery.endpoint_id, delivery.event_type, delivery.status) == (
        "whk_1",
        "draft.proposed",
        DeliveryStatus.PENDING,
    )
    assert (delivery.revision, delivery.audit_seq, delivery.republish_at) == (1, 1, None)


def test_the_unit_of_work_wires_it_and_a_rollback_announces_nothing(runtime):
    subscribe(runtime)
    with session_scope(runtime.engine) as session:
        proposed_event(session)
    assert len(deliveries(runtime)) == 1

    def rolled_back() -> None:
        with session_scope(runtime.engine) as session:
            proposed_event(session)
            raise RuntimeError("the change is rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    assert len(deliveries(runtime)) == 1


def test_the_chain_knows_nothing_of_webhooks():
    imported = set()
    for node in ast.walk(ast.parse(CHAIN.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if name.startswith("service.webhooks")}
