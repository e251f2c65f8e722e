"""The queue and the inbox count approvals for a whole page in a fixed number of statements.

Every line is counted as the execute gate counts it (each signature verified, keys and
policy peers looked up), so without batching a page of 50 drafts would cost a few queries
per line. The count is the same for 4 drafts as for 50.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from mcp_adapter.tools import ToolDoor
from service.db import session_scope
from service.drafts import review
from service.runtime import Runtime
from service.sessions import inbox as inboxes
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.core import approve_in_core

ORDERS = [("ORD-1004", "USD", 1_000), ("ORD-1006", "JPY", 100), ("ORD-1007", "KWD", 1_000)]


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def propose_drafts(runtime: Runtime, demo: dict[str, Any], count: int, start: int = 0) -> None:
    """``count`` refunds in three currencies, every fourth one approved by alice: approved,
    or still proposed where the policy wants two (KWD has no tier of its own)."""
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    for n in range(start, start + count):
        order_id, currency, base = ORDERS[n % len(ORDERS)]
        arguments = {
            "order_id": order_id,
            "amount": {"amount_minor": base + n, "currency": currency},
            "reason": "damaged",
        }
        draft_id = door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"]
        if n % 4 == 1:
            approve_in_core(runtime, demo, draft_id, "alice")


def views(runtime: Runtime, demo: dict[str, Any]) -> dict[str, int]:
    """Statements each view ran, and how many lines it showed."""
    counted: dict[str, int] = {}
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    with session_scope(runtime.engine) as session:
        bob = tokens.authenticate(session, demo["tokens"]["approver_bob"])
        auditor = tokens.authenticate(session, demo["tokens"]["auditor"])
        for name, read in {
            "list": lambda: (
                review.list_drafts(
                    session, auditor, runtime=runtime, limit=100, now=utcnow()
                ).drafts
            ),
            "inbox of an approver": lambda: inboxes.inbox(
                session, bob, runtime=runtime, now=utcnow(), status=inboxes.InboxStatus.OPEN
            ),
            "inbox of an auditor": lambda: inboxes.inbox(
                session, auditor, runtime=runtime, now=utcnow(), status=inboxes.InboxStatus.OPEN
            ),
        }.items():
            seen.clear()
            event.listen(runtime.engine, "before_cursor_execute", record)
            try:
                counted[f"{name}: lines"] = len(read())
            finally:
                event.remove(runtime.engine, "before_cursor_execute", record)
            counted[name] = len(seen)
    return counted


def test_a_page_of_50_costs_the_statements_a_page_of_4_does(runtime, demo):
    propose_drafts(runtime, demo, 4)
    few = views(runtime, demo)
    propose_drafts(runtime, demo, 46, start=4)

    many = views(runtime, demo)

    assert (few["list: lines"], many["list: lines"]) == (4, 50)
    assert many["inbox of an auditor: lines"] == 50
    for name in ("list", "inbox of an approver", "inbox of an auditor"):
        assert many[name] == few[name], (name, few, many)
    # The page, the approvals, the grants' uses (and, when there are some, their grants), the
    # keys (one query per scheme), the policy peers.
    assert many["list"] <= 6, many
