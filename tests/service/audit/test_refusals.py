"""One refusal recorder (service.audit.refusals) and one error object (DomainError).

Its shape, decided once: ``<operation>.refused`` (``security.<operation>_refused``), the
principal's actor or ``anonymous``, the masked context, ``error`` = the error's audit form,
``suppressed_before``. Then: every door and the worker records through it, so their events
agree on that shape (the worker's claim-time refusal, the credential refusal and the
console's pre-route refusal each recorded an ``error`` of their own shape, or none); and no
module but the recorder writes a refusal event or rebuilds the error object.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.approvals.models import Approval
from service.audit.models import AuditEvent
from service.audit.refusals import MAX_ITEMS, MAX_TEXT, Refusal, record_refusal
from service.audit.traces import describe
from service.db import session_scope
from service.errors import RATE_LIMITED, UNAUTHENTICATED, invalid_argument
from service.executions.errors import APPROVALS_UNVERIFIED
from service.executions.runner import run_execution
from service.metrics import REFUSALS
from service.principal import Principal, Role
from service.tracing import new_trace_id
from tests.support.api_client import bearer, in_process
from tests.support.core import approve_in_core, request_execution_in_core

ROOT = Path(__file__).parents[3]
ALICE = Principal(tenant="demo", subject="alice", role=Role.APPROVER, token_id="tok_1")
REFUND = {"order_id": "ORD-1004", "amount": {"amount_minor": 2500, "currency": "USD"}}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # what is recorded does not depend on the database


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"rate_limit_per_address": "20/minute", "rate_limit_recorded_refusals": "30/minute"}


def events_of(runtime, type_: str) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.type) == type_)
        return list(session.exec(statement.order_by(col(AuditEvent.seq))).all())


def test_the_shape_is_decided_once(runtime):
    error = invalid_argument("The amount is missing.", details={"problems": ["amount"]})
    hostile = "get_order\u202e" + "x" * 1000
    context: dict[str, Any] = {
        "tool": hostile,
        "argument_names": [f"a{i}" for i in range(100)],
        "latency_us": 12,
        "nested": {"door": "mcp\u200b"},
    }
    with session_scope(runtime.engine) as session:
        record_refusal(
            session,
            Refusal.by(ALICE, "tool", error, draft_id="dft_x", trace_id="f" * 32, context=context),
            suppressed_before=3,
        )
        record_refusal(session, Refusal("auth", UNAUTHENTICATED("No."), "demo"))
        record_refusal(session, Refusal("execution", error, "demo", "system:worker", security=True))

    [tool] = events_of(runtime, "tool.refused")
    assert (tool.tenant, tool.actor, tool.draft_id, tool.trace_id) == (
        "demo",
        "approver:alice",
        "dft_x",
        "f" * 32,
    )
    assert tool.data["error"] == {
        "code": "INVALID_ARGUMENT",
        "category": "invalid_argument",
        "message": "The amount is missing.",
    }
    assert tool.data["suppressed_before"] == 3
    assert tool.data["tool"].startswith("get_order\\u202e")  # inert: shown, never obeyed
    assert len(tool.data["tool"]) == MAX_TEXT
    assert tool.data["argument_names"] == [f"a{i}" for i in range(MAX_ITEMS)]
    assert tool.data["latency_us"] == 12
    assert tool.data["nested"] == {"door": "mcp\\u200b"}
    [auth] = events_of(runtime, "auth.refused")
    assert (auth.actor, "suppressed_before" in auth.data) == ("anonymous", False)
    [security] = events_of(runtime, "security.execution_refused")
    assert security.actor == "system:worker"


def test_the_audit_form_is_the_wire_form_without_advice_or_details():
    error = invalid_argument("Bad.", details={"problems": ["x"]})
    wire = error.to_dict()
    assert error.audit_form() == {k: wire[k] for k in ("code", "category", "message")}
    assert set(wire) - set(error.audit_form()) == {"retryable", "suggested_action", "details"}


def test_the_workers_refusal_has_the_shape_of_every_other_refusal(runtime, demo):
    """It recorded ``{"problem", "code"}``: no ``error``, so its trace line said "None: None"
    and the same type, ``execution.refused``, had two shapes (the execute route's, and it)."""
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = door.call("propose_refund", {**REFUND, "reason": "damaged"}, new_trace_id(), None)[
        "draft_id"
    ]
    approve_in_core(runtime, demo, draft_id)
    execution, _ = request_execution_in_core(runtime, demo, draft_id)
    with session_scope(runtime.engine) as session:  # someone with DB access removes the proof
        session.execute(delete(Approval).where(col(Approval.draft_id) == draft_id))

    assert run_execution(runtime, execution.id).status == "failed"

    [refused] = events_of(runtime, "security.execution_refused")
    assert refused.actor == "system:worker"
    assert refused.data["error"]["code"] == "APPROVALS_UNVERIFIED"
    assert refused.data["error"]["category"] == APPROVALS_UNVERIFIED.category.value
    assert describe(refused).startswith("security.execution_refused: APPROVALS_UNVERIFIED: ")


def test_a_refused_credential_records_the_error_and_a_flood_counts_by_its_code(runtime, demo):
    """``auth.refused`` recorded no error, so every credential refusal counted as
    UNAUTHENTICATED, an address flood's RATE_LIMITED ones included."""
    from service.api.app import create_app

    limited = REFUSALS.labels(RATE_LIMITED.code)
    before = limited._value.get()
    with in_process(create_app(runtime, publisher=lambda task, args: None)) as api:
        answers = [api.get("/v1/drafts", headers=bearer(f"dg_bad{i}")) for i in range(25)]
    assert {a.status_code for a in answers} == {401, 429}

    refused = events_of(runtime, "auth.refused")
    assert {e.data["error"]["code"] for e in refused} == {"UNAUTHENTICATED", "RATE_LIMITED"}
    assert all(e.data["reason"] == e.data["error"]["message"] for e in refused)
    assert limited._value.get() > before


# --- no second recorder, no second error object ----------------------------------------------


def _sources() -> list[tuple[str, ast.AST]]:
    roots = ("service", "mcp_adapter", "workers")
    return [
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text()))
        for root in roots
        for path in sorted((ROOT / root).rglob("*.py"))
    ]


def _refusal_types(tree: ast.AST) -> list[str]:
    """``type=`` arguments naming a refusal event (a string, or an f-string, ending so)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg != "type":
                continue
            if isinstance(value, ast.JoinedStr) and value.values:
                value = value.values[-1]
            if isinstance(value, ast.Constant) and str(value.value).endswith("refused"):
                found.append(str(value.value))
    return found


def _error_objects(tree: ast.AST) -> int:
    """Dict literals that rebuild the error object (its code, category and message)."""
    keys = {"code", "category", "message"}
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        and keys <= {k.value for k in node.keys if isinstance(k, ast.Constant)}
    )


def test_no_module_but_the_recorder_writes_a_refusal_event():
    writers = {path for path, tree in _sources() if _refusal_types(tree)}
    assert writers == set(), "record refusals through service.audit.refusals.record_refusal"


def test_no_module_but_domain_error_builds_the_error_object():
    builders = {path for path, tree in _sources() if _error_objects(tree)}
    assert builders == {"service/errors.py"}, "render an error with DomainError.audit_form"


def test_the_checks_above_can_fail():
    """Each check finds what it looks for (the shapes the seven recorders used)."""
    tree = ast.parse(
        'audit.record(s, type="auth.refused")\n'
        'audit.record(s, type=f"{operation}.refused")\n'
        'x = {"code": e.code, "category": e.category.value, "message": e.message}\n'
    )
    assert _refusal_types(tree) == ["auth.refused", ".refused"]
    assert _error_objects(tree) == 1
