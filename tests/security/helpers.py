"""Acting as the agent, the approver and the worker through the core, for security tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.audit.models import AuditEvent
from service.registry.loader import build_registry
from service.runtime import Runtime
from service.shop.definitions import ACTIONS, RefundAction
from service.tracing import new_trace_id

ORDER = "ORD-1004"  # delivered 3 days ago, total 785.00 USD


def agent(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def propose_refund(door: ToolDoor, amount_minor: int = 2_500, **extra: Any) -> dict[str, Any]:
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        **extra,
    }
    result: dict[str, Any] = door.call("propose_refund", arguments, new_trace_id(), None)
    return result


class RefundV2(RefundAction):
    """The refund action after a release that changed its contract."""

    contract_version = 2


def with_refund_contract_2(runtime: Runtime) -> Runtime:
    """The same database and settings, with code whose refund contract moved on."""
    actions = [RefundV2() if isinstance(a, RefundAction) else a for a in ACTIONS]
    return dataclasses.replace(runtime, registry=build_registry(actions))


def events(runtime: Runtime, type_: str, draft_id: str | None = None) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == type_)
        if draft_id is not None:
            statement = statement.where(col(AuditEvent.draft_id) == draft_id)
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())
