"""Reading drafts over HTTP: the approver's queue, one draft in full, OpenAPI, executions.

The API runs in-process (``httpx.ASGITransport``, tests/support/api_client.py); one test
serves it with uvicorn. Rendering, roles and input refusals run on SQLite; the queue's SQL
(tenant, status and action filters, keyset pagination, expiry) and the round trip of params
through the database run on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
from sqlalchemy import select, update
from sqlmodel import Session, col

from harness.approvals import signed_decision
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals.schemas import Decision
from service.audit.models import AuditEvent
from service.canonical import canonical_json
from service.db import session_scope
from service.drafts.models import Draft
from service.keys import actions as keys
from service.principal import Role
from service.shop.seed import seed_shop
from service.signing import generate_private_key, load_private_key, public_key_b64, sign
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.api_client import (
    bearer,
    get_draft,
    in_process,
    served,
)
from tests.support.backends import both_backends

PROBLEM_JSON = "application/problem+json"
TENANT = "demo"
OPERATOR = "operator:test"
ISSUED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$")
ADDRESS = {
    "recipient": "Ada King",
    "lines": ["10 Downing Street", "Flat 2"],
    "district": "Westminster",
    "city": "London",
    "postal_code": "SW1A 2AA",
    "country": "GB",
    "phone": "+447700900999",
}


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def call(door: ToolDoor, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return door.call(tool, arguments, new_trace_id(), None)


def refund(door: ToolDoor, amount_minor: int = 2_500, **extra: Any) -> dict[str, Any]:
    return call(
        door,
        "propose_refund",
        {
            "order_id": "ORD-1004",
            "amount": {"amount_minor": amount_minor, "currency": "USD"},
            "reason": "damaged",
            **extra,
        },
    )


def get(api: httpx.Client, token: str, path: str, **params: Any) -> httpx.Response:
    return api.get(path, params=params, headers=bearer(token))


def listed(api: httpx.Client, token: str, **params: Any) -> dict[str, Any]:
    response = get(api, token, "/v1/drafts", **params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def ids(page: dict[str, Any]) -> list[str]:
    return [draft["draft_id"] for draft in page["drafts"]]


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem: dict[str, Any] = response.json()
    assert (problem["code"], problem["status"], problem["retryable"]) == (code, status, False)
    return problem


def sign_and_post(
    api: httpx.Client, demo: dict[str, Any], draft_id: str, approver: str, **kw: Any
) -> dict[str, Any]:
    who = demo["tokens"][f"approver_{approver}"]
    body = signed_decision(
        get_draft(api, who, draft_id),
        approver=approver,
        key_file=demo["approvers"][approver]["private_key_file"],
        **kw,
    )
    response = api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(who))
    assert response.status_code == 201, response.text
    detail: dict[str, Any] = response.json()
    return detail


# --- the queue -------------------------------------------------------------------------------


@both_backends
def test_the_queue_lists_only_the_callers_tenant(api, runtime, demo, door):
    ours = refund(door)["draft_id"]
    with session_scope(runtime.engine) as session:
        seed_shop(session, "acme", now=utcnow())
        acme_agent = tokens.issue(
            session,
            tenant="acme",
            subject="acme-bot",
            role=Role.AGENT,
            on_behalf_of="cust-ada",
            actor=OPERATOR,
        ).token
        acme_approver = tokens.issue(
            session, tenant="acme", subject="alice", role=Role.APPROVER, actor=OPERATOR
        ).token
    theirs = refund(ToolDoor(runtime, stdio_token=acme_agent))["draft_id"]

    assert ids(listed(api, demo["tokens"]["approver_alice"])) == [ours]
    assert ids(listed(api, demo["tokens"]["auditor"])) == [ours]
    assert ids(listed(api, acme_approver)) == [theirs]
    # the other tenant's draft is as unavailable as one that does not exist
    for token, draft_id in ((demo["tokens"]["approver_alice"], theirs), (acme_approver, ours)):
        assert_problem(get(api, token, f"/v1/drafts/{draft_id}"), 404, "DRAFT_UNAVAILABLE")


@both_backends
def test_the_queue_filters_by_status_and_action(api, runtime, demo, door):
    proposed = refund(door, 1_000)["draft_id"]
    approved = refund(door, 1_100)["draft_id"]
    rejected = refund(door, 1_200)["draft_id"]
    cancel = call(
        door, "propose_cancel_order", {"order_id": "ORD-1002", "reason": "duplicate_order"}
    )
    address = call(
        door, "propose_change_shipping_address", {"order_id": "ORD-1001", "address": ADDRESS}
    )
    sign_and_post(api, demo, approved, "alice")
    sign_and_post(api, demo, rejected, "bob", decision=Decision.REJECT, reason="no")
    alice = demo["tokens"]["approver_alice"]

    assert set(ids(listed(api, alice))) == {
        proposed,
        approved,
        rejected,
        cancel["draft_id"],
        address["draft_id"],
    }
    assert set(ids(listed(api, alice, status="proposed"))) == {
        proposed,
        cancel["draft_id"],
        address["draft_id"],
    }
    assert ids(listed(api, alice, status="approved")) == [approved]
    assert ids(listed(api, alice, status="rejected")) == [rejected]
    assert ids(listed(api, alice, status="succeeded")) == []
    assert set(ids(listed(api, alice, action="refund"))) == {proposed, approved, rejected}
    assert ids(listed(api, alice, action="cancel_order")) == [cancel["draft_id"]]
    assert ids(listed(api, alice, action="refund", status="rejected")) == [rejected]
    assert ids(listed(api, alice, action="no_such_action")) == []
    assert_problem(get(api, alice, "/v1/drafts", status="bogus"), 400, "INVALID_ARGUMENT")


def test_a_queue_line_shows_status_amount_and_approval_progress(api, demo, door):
    draft_id = refund(door, 60_000)["draft_id"]
    sign_and_post(api, demo, draft_id, "alice")

    [line] = listed(api, demo["tokens"]["approver_bob"])["drafts"]

    assert line["draft_id"] == draft_id
    assert (line["action"], line["status"], line["revision"]) == ("refund", "proposed", 1)
    assert line["approvals"] == {
        "required": 2,
        "received": 1,
        "missing": 1,
        "approvers": ["alice"],
        "rejected_by": [],
        "met": False,
        "problem": None,
    }
    assert line["amount"]["amount_minor"] == 60_000
    assert line["amount"]["currency"] == "USD"
    assert "600.00" in line["summary"]


@both_backends
def test_cursor_pagination_walks_every_draft_once_newest_first(api, demo, door):
    created = [refund(door, 1_000 + n)["draft_id"] for n in range(7)]
    alice = demo["tokens"]["approver_alice"]

    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = listed(api, alice, **params)
        pages.append(ids(page))
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(pages) < 10, "pagination does not end"

    assert [len(page) for page in pages] == [2, 2, 2, 1]
    walked = [draft_id for page in pages for draft_id in page]
    assert len(walked) == len(set(walked)), "a draft appeared on two pages"
    assert walked == list(reversed(created)), "not every draft, or not newest first"
    # the full list agrees with the walk
    assert ids(listed(api, alice, limit=100)) == walked
    assert listed(api, alice, limit=100)["next_cursor"] is None


@both_backends
def test_a_page_that_ends_exactly_at_the_limit_has_no_next_cursor(api, demo, door):
    for n in range(4):
        refund(door, 2_000 + n)
    alice = demo["tokens"]["approver_alice"]
    first = listed(api, alice, limit=2)
    second = listed(api, alice, limit=2, cursor=first["next_cursor"])
    assert len(ids(second)) == 2
    assert second["next_cursor"] is None


@both_backends
def test_cursor_pagination_respects_filters(api, demo, door):
    refunds = [refund(door, 3_000 + n)["draft_id"] for n in range(3)]
    call(door, "propose_cancel_order", {"order_id": "ORD-1002", "reason": "duplicate_order"})
    alice = demo["tokens"]["approver_alice"]
    first = listed(api, alice, action="refund", limit=2)
    second = listed(api, alice, action="refund", limit=2, cursor=first["next_cursor"])
    assert ids(first) + ids(second) == list(reversed(refunds))
    assert second["next_cursor"] is None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


FOREIGN_CURSORS = {
    "garbage": "garbage",
    "not-base64": "!!!!",
    "not-json": _b64(b"not json"),
    "an-object": _b64(b'{"a": 1}'),
    "numbers": _b64(b"[1, 2]"),
    "three-items": _b64(b"[1, 2, 3]"),
    "not-a-time": _b64(b'["yesterday", "dft_x"]'),
    "not-utf8": _b64(b"\xff\xfe"),
    "a-naive-time": _b64(b'["2026-01-01T00:00:00", "dft_x"]'),
    "too-long": "x" * 201,
}


def test_a_cursor_the_api_did_not_return_is_400(api, demo, door):
    refund(door)
    for name, cursor in FOREIGN_CURSORS.items():
        response = get(api, demo["tokens"]["approver_alice"], "/v1/drafts", cursor=cursor, limit=2)
        assert response.status_code == 400, (name, response.text)
        assert_problem(response, 400, "INVALID_ARGUMENT")


def test_a_limit_outside_1_to_100_is_400(api, demo):
    for limit in ["0", "101", "-1", "two", "1.5"]:
        response = get(api, demo["tokens"]["approver_alice"], "/v1/drafts", limit=limit)
        assert response.status_code == 400, (limit, response.text)
        assert_problem(response, 400, "INVALID_ARGUMENT")


# --- one draft in full -------------------------------------------------------------------------


@both_backends
def test_a_draft_shows_its_exact_params_and_their_digest(api, demo, door):
    draft_id = refund(door, 2_500, note="Box arrived crushed", idempotency_key="ticket-1")[
        "draft_id"
    ]

    draft = get_draft(api, demo["tokens"]["approver_alice"], draft_id)

    # exactly the business arguments: no idempotency_key, no draft_id
    assert draft["params"] == {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
        "note": "Box arrived crushed",
    }
    digest = hashlib.sha256(rfc8785.dumps(draft["params"])).hexdigest()
    assert draft["params_sha256"] == digest
    assert draft["tenant"] == TENANT
    assert (draft["action"], draft["contract_version"], draft["revision"]) == ("refund", 1, 1)
    assert draft["status"] == "proposed"
    assert draft["status_reason"] is None
    assert "25.00" in draft["summary"]
    assert "ORD-1004" in draft["summary"]
    assert draft["amount"]["amount_minor"] == 2_500
    assert draft["proposed_by"] == {"agent": "support-agent", "on_behalf_of": "cust-ada"}
    assert draft["approvals"] == []
    assert draft["execution"] is None
    assert draft["approvals_required"] == 1


@both_backends
def test_a_draft_shows_full_params_to_approvers_while_the_agent_sees_them_masked(api, demo, door):
    proposed = call(
        door, "propose_change_shipping_address", {"order_id": "ORD-1001", "address": ADDRESS}
    )
    assert proposed["params"]["address"]["recipient"] == "***"  # the agent's masked view

    for who in ("approver_alice", "auditor"):
        draft = get_draft(api, demo["tokens"][who], proposed["draft_id"])
        assert draft["params"] == {"order_id": "ORD-1001", "address": ADDRESS}
        assert draft["params_sha256"] == hashlib.sha256(rfc8785.dumps(draft["params"])).hexdigest()
        assert draft["params_sha256"] == proposed["params_sha256"]


def test_a_draft_shows_its_policy(api, demo, door):
    small = get_draft(api, demo["tokens"]["approver_alice"], refund(door, 2_500)["draft_id"])
    large = get_draft(api, demo["tokens"]["approver_alice"], refund(door, 60_000)["draft_id"])
    assert small["approvals_required"] == 1
    assert large["approvals_required"] == 2
    assert small["policy"]["approvals_required"] == 1
    assert large["policy"]["approvals_required"] == 2
    assert small["policy"]["rule"]
    assert large["policy"]["rule"]
    assert small["policy"]["rule"] != large["policy"]["rule"]


def test_the_statement_to_sign_matches_the_draft_and_names_alices_only_key(api, demo, door):
    draft_id = refund(door)["draft_id"]

    draft = get_draft(api, demo["tokens"]["approver_alice"], draft_id)

    statement = draft["statement_to_sign"]
    assert ISSUED_AT.match(statement.pop("issued_at"))
    assert statement == {
        "type": "draftgate.approval.v1",
        "tenant": TENANT,
        "draft_id": draft_id,
        "revision": 1,
        "action": "refund",
        "contract_version": 1,
        "params_sha256": hashlib.sha256(rfc8785.dumps(draft["params"])).hexdigest(),
        "source_revision": draft["source_revision"],
        "decision": "approve",
        "approver": "alice",
        "key_id": demo["approvers"]["alice"]["key_id"],
    }
    assert draft["source"]["revision"] == draft["source_revision"]  # the order as shown
    bobs = get_draft(api, demo["tokens"]["approver_bob"], draft_id)["statement_to_sign"]
    assert (bobs["approver"], bobs["key_id"]) == ("bob", demo["approvers"]["bob"]["key_id"])


def test_the_statement_to_sign_is_what_the_server_accepts(api, runtime, demo, door):
    """Signing statement_to_sign verbatim (as a careful client would after checking it) works."""
    draft_id = refund(door)["draft_id"]
    statement = get_draft(api, demo["tokens"]["approver_alice"], draft_id)["statement_to_sign"]
    key = load_private_key(Path(demo["approvers"]["alice"]["private_key_file"]))
    response = api.post(
        f"/v1/drafts/{draft_id}/approvals",
        json={"statement": statement, "signature": sign(key, canonical_json(statement))},
        headers=bearer(demo["tokens"]["approver_alice"]),
    )
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "approved"


def test_the_statement_to_sign_has_no_key_id_unless_exactly_one_key_is_active(
    api, runtime, demo, door
):
    draft_id = refund(door)["draft_id"]
    alice = demo["tokens"]["approver_alice"]
    second = public_key_b64(generate_private_key())
    with session_scope(runtime.engine) as session:
        registered = keys.register(
            session, tenant=TENANT, approver="alice", public_key=second, actor=OPERATOR
        )
    assert get_draft(api, alice, draft_id)["statement_to_sign"]["key_id"] is None  # two keys

    with session_scope(runtime.engine) as session:
        keys.revoke(
            session, tenant=TENANT, key_id=demo["approvers"]["alice"]["key_id"], actor=OPERATOR
        )
    assert get_draft(api, alice, draft_id)["statement_to_sign"]["key_id"] == registered.key_id

    with session_scope(runtime.engine) as session:
        keys.revoke(session, tenant=TENANT, key_id=registered.key_id, actor=OPERATOR)
    assert get_draft(api, alice, draft_id)["statement_to_sign"]["key_id"] is None  # none active


def test_an_approver_without_a_key_gets_a_statement_with_a_null_key_id(api, runtime, demo, door):
    draft_id = refund(door)["draft_id"]
    with session_scope(runtime.engine) as session:
        dave = tokens.issue(
            session, tenant=TENANT, subject="dave", role=Role.APPROVER, actor=OPERATOR
        ).token
    statement = get_draft(api, dave, draft_id)["statement_to_sign"]
    assert (statement["approver"], statement["key_id"]) == ("dave", None)


def test_auditors_read_drafts_but_get_no_statement_to_sign(api, demo, door):
    draft_id = refund(door)["draft_id"]
    auditor = demo["tokens"]["auditor"]

    draft = get_draft(api, auditor, draft_id)

    assert draft["draft_id"] == draft_id
    assert draft["params"]["order_id"] == "ORD-1004"
    assert draft["statement_to_sign"] is None
    assert ids(listed(api, auditor)) == [draft_id]


def test_a_decided_draft_offers_no_statement_to_sign(api, demo, door):
    approved = refund(door, 1_000)["draft_id"]
    rejected = refund(door, 1_100)["draft_id"]
    sign_and_post(api, demo, approved, "alice")
    sign_and_post(api, demo, rejected, "alice", decision=Decision.REJECT, reason="no")
    for draft_id, status in ((approved, "approved"), (rejected, "rejected")):
        draft = get_draft(api, demo["tokens"]["approver_bob"], draft_id)
        assert draft["status"] == status
        assert draft["statement_to_sign"] is None


def test_a_draft_shows_approvals_so_far_and_every_revision(api, demo, door):
    draft_id = refund(door, 60_000)["draft_id"]
    first = get_draft(api, demo["tokens"]["approver_alice"], draft_id)
    sign_and_post(api, demo, draft_id, "alice")
    revised = refund(door, 61_000, draft_id=draft_id)
    assert revised["revision"] == 2
    sign_and_post(api, demo, draft_id, "bob")

    draft = get_draft(api, demo["tokens"]["auditor"], draft_id)

    assert draft["revision"] == 2
    assert draft["params"]["amount"]["amount_minor"] == 61_000
    assert [r["revision"] for r in draft["revisions"]] == [1, 2]
    assert draft["revisions"][0]["params_sha256"] == first["params_sha256"]
    assert draft["revisions"][1]["params_sha256"] == draft["params_sha256"]
    assert draft["revisions"][0]["params_sha256"] != draft["revisions"][1]["params_sha256"]
    assert all(r["summary"] for r in draft["revisions"])
    by_approver = {a["approver"]: a for a in draft["approvals"]}
    assert set(by_approver) == {"alice", "bob"}
    alice, bob = by_approver["alice"], by_approver["bob"]
    assert (alice["revision"], alice["counts"]) == (1, False)
    assert alice["problem"] == "signed an earlier revision"
    assert (bob["revision"], bob["counts"], bob["problem"]) == (2, True, None)
    assert bob["decision"] == "approve"
    assert bob["key_id"] == demo["approvers"]["bob"]["key_id"]
    assert ISSUED_AT.match(bob["issued_at"])
    assert draft["status"] == "proposed"  # 1 counted approval of 2


@pytest.mark.parametrize(
    ("draft_id", "status", "code"),
    [
        ("dft_" + "0" * 32, 404, "DRAFT_UNAVAILABLE"),
        # malformed ids never reach a query (a column bound would turn them into a 500)
        ("not-even-a-draft-id", 400, "INVALID_ARGUMENT"),
        ("dft_" + "0" * 100, 400, "INVALID_ARGUMENT"),
    ],
)
def test_an_unknown_or_malformed_draft_id_is_refused_and_audited(
    api, runtime, demo, draft_id, status, code
):
    response = get(api, demo["tokens"]["approver_alice"], f"/v1/drafts/{draft_id}")
    assert_problem(response, status, code)
    with Session(runtime.engine) as session:
        refused = session.scalars(
            select(AuditEvent)
            .where(col(AuditEvent.type) == "drafts.read.refused")
            .order_by(col(AuditEvent.seq).desc())
        ).first()
    assert refused is not None
    assert (refused.draft_id, refused.data["error"]["code"]) == (draft_id[:64], code)


@both_backends
def test_reading_a_draft_past_its_expiry_marks_it_expired(api, runtime, demo, door):
    draft_id = refund(door)["draft_id"]
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    draft = get_draft(api, demo["tokens"]["approver_alice"], draft_id)
    assert draft["status"] == "expired"
    assert draft["statement_to_sign"] is None
    assert ids(listed(api, demo["tokens"]["approver_alice"], status="expired")) == [draft_id]


# --- OpenAPI, executions ------------------------------------------------------------------------


def test_openapi_is_served_at_openapi_json_and_no_cdn_docs_page(runtime):
    """Over a real uvicorn server: the wiring, not only the app. No /docs or /redoc: their
    pages load unpinned CDN scripts on the console's origin."""
    with served(create_app(runtime)) as api:
        pages = [api.get("/docs"), api.get("/redoc")]
        spec = api.get("/openapi.json")
    assert spec.status_code == 200
    assert spec.headers["content-type"] == "application/json"
    assert [page.status_code for page in pages] == [404, 404]


APPROVER_ROUTES = {
    "/v1/drafts": {"get"},
    "/v1/drafts/{draft_id}": {"get"},
    "/v1/drafts/{draft_id}/approvals": {"post"},
    "/v1/drafts/{draft_id}/execute": {"post"},
    "/v1/executions/{execution_id}": {"get"},
}
AUDITOR_ROUTES = {
    "/v1/audit/events": {"get"},
    "/v1/audit/export": {"get"},
    "/v1/audit/verify": {"get"},
    "/v1/traces/{trace_id}": {"get"},
}


def _openapi_paths(api: httpx.Client) -> dict[str, set[str]]:
    spec = api.get("/openapi.json").json()
    return {
        path: set(operations)
        for path, operations in spec["paths"].items()
        if path.startswith("/v1")
    }


def test_openapi_lists_every_v1_route_of_the_design(api):
    """DESIGN.md §9's table, approver and auditor routes alike."""
    documented = _openapi_paths(api)
    for path, methods in [*APPROVER_ROUTES.items(), *AUDITOR_ROUTES.items()]:
        assert methods <= documented.get(path, set()), f"{path} missing from /openapi.json"


def test_openapi_documents_the_strict_approval_body(api):
    spec = api.get("/openapi.json").json()
    body = spec["paths"]["/v1/drafts/{draft_id}/approvals"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    text = json.dumps(schema)
    assert "statement" in text
    assert "signature" in text
    assert '"additionalProperties": false' in text


def test_an_unknown_execution_is_404(api, runtime, demo):
    for who in ("approver_alice", "auditor"):
        response = get(api, demo["tokens"][who], "/v1/executions/exe_000000000000000000000000")
        problem = assert_problem(response, 404, "EXECUTION_UNAVAILABLE")
        assert problem["category"] == "unavailable"


@both_backends
def test_the_queue_does_not_list_a_draft_past_its_expiry_as_proposed(api, runtime, demo, door):
    """Expiry is enforced on every read (docs/decisions/expiry-enforced-on-every-touch.md): a
    draft past expires_at is expired the moment anything touches it, so the queue must not
    offer it as waiting for approval."""
    draft_id = refund(door)["draft_id"]
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    alice = demo["tokens"]["approver_alice"]

    assert ids(listed(api, alice, status="proposed")) == []
    [line] = listed(api, alice)["drafts"]
    assert line["status"] == "expired"
