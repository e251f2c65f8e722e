"""Looking at a running stack from a worker test: executions, refunds, the audit chain."""

from __future__ import annotations

import time
from typing import Any

import httpx
from sqlmodel import col, select

from service.audit import actions as audit_actions
from service.db import session_scope
from service.shop.models import Refund
from tests.support.approvals import bearer

FINISHED = {"succeeded", "failed"}


def get_execution(stack: Any, execution_id: str) -> dict[str, Any]:
    response = httpx.get(
        f"{stack.api_url}/v1/executions/{execution_id}",
        headers=bearer(stack.demo["tokens"]["auditor"]),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_for_execution(stack: Any, execution_id: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = get_execution(stack, execution_id)
        if body["status"] in FINISHED or time.monotonic() > deadline:
            return body
        time.sleep(0.2)


def refunds(stack: Any, idempotency_key: str | None = None) -> list[Refund]:
    with session_scope(stack.runtime.engine) as session:
        statement = select(Refund)
        if idempotency_key is not None:
            statement = statement.where(col(Refund.idempotency_key) == idempotency_key)
        return list(session.exec(statement).all())


def chain_verifies(stack: Any) -> bool:
    with session_scope(stack.runtime.engine) as session:
        return audit_actions.verify(session, "demo").ok
