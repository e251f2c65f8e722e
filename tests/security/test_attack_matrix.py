"""Security issue: the attack matrix. Every route the API serves, asked by every kind of
caller of the own and of a foreign tenant, answers what DESIGN.md §7 and §9 say; and forged or
replayed approvals are refused, audited, and leave nothing that could be executed.

Part 1, the matrix. The routes are read from the app itself (``create_app(...).routes``, and
the OpenAPI document must agree), so a route added without an expectation here fails
``test_the_matrix_covers_every_route_the_app_serves``. Callers: no token, an unknown token, a
revoked token (of the role the route would accept), the agent, an approver, an auditor and
an admin. Tenants: a caller of "demo" asks for demo's objects (own); a caller of "acme" asks
for demo's objects (foreign), and must get exactly what a missing object gets (same status,
same problem body but its ``instance``, same refusal event), so nothing tells it that the
object exists. Callers without a tenant (no or an unknown token) ask for demo's objects in
the "demo" column and for acme's in the "acme" column. Collections (the queue, the audit log)
answer a foreign caller with its own tenant's data only. Every refusal is audited exactly
once (``auth.refused`` for credentials, ``<route name>.refused`` for the rest, DESIGN.md §8,
docs/decisions/refusals-audited-by-route-name.md) and changes nothing: no approval, no
execution, no outbox row, no draft status or revision.

Part 2, forged and replayed approvals (DESIGN.md §4, docs/approvals.md): each variant is
refused with the status and code the documented rules give, leaves exactly one
``approval.refused`` event with that code, records no approval, changes no draft, and
execution of the draft is refused afterwards; where the draft is still open, a legitimate
decision is accepted afterwards, so the refusal was the forgery's and not the draft's.

SQLite only (what is checked here does not depend on the backend), except the one race where
the database's locking decides: the same valid approval sent many times at once, on
PostgreSQL. Bounded for CI; ``DRAFTGATE_ATTACK_FULL=1`` flips every one of the 512 bits of a
signature instead of four of them:

    DRAFTGATE_ATTACK_FULL=1 .venv/bin/pytest -p no:cacheprovider -q \
        tests/security/test_attack_matrix.py
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import httpx
import pytest
from anyio.from_thread import start_blocking_portal
from fastapi.routing import APIRoute
from sqlalchemy import select
from sqlmodel import Session, col
from starlette.routing import Mount

from service.api import console as console_package
from service.api.app import create_app
from service.approvals.schemas import Decision
from service.audit.models import AuditEvent
from service.canonical import canonical_json, params_sha256
from service.grants.models import Grant
from service.keys import passkeys
from service.keys.models import KeyEnrolment
from service.signing import b64url, generate_private_key, key_id_for, public_key_b64
from service.sql import utcnow
from service.tracing import new_trace_id
from service.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.security.attack_support import (
    ACME,
    DEMO,
    GRANT_TERMS,
    NO_RATE_LIMITS,
    PROBLEM_JSON,
    TENANTS,
    TWO_APPROVER_ORDER,
    WEBHOOK_URL,
    Attempt,
    Caller,
    Lab,
    State,
    World,
    api_client,
    batch_body,
    escaped_json,
    flip_bit,
    grant_body,
    missing_draft_id,
    missing_execution_id,
    module_world,
    padding_bits_set,
    refused_with,
    s_plus_l,
    signed_body,
    signed_by,
)
from tests.support.api_client import _PortalTransport, in_process
from tests.support.backends import postgresql_only

ROLES = ("none", "unknown", "revoked", "agent", "approver", "auditor", "admin")
TENANTLESS = frozenset({"none", "unknown"})
UNAUTHENTICATED_ROLES = frozenset({"none", "unknown", "revoked"})
APPROVER, AUDITOR, REVIEWER, ADMIN = (
    frozenset({"approver"}),
    frozenset({"auditor"}),
    frozenset({"approver", "auditor"}),
    frozenset({"admin"}),
)
# The console (/console/*) is a different door: a session cookie and a CSRF token, never a
# bearer token, and HTML pages besides JSON. Its answers are not this matrix's (401 problem vs
# a redirect to the sign-in page, CSRF before the role), so its routes are kept out of the
# bearer matrix by this one prefix, and proved in part 5 below instead. Nothing else is: a
# new route anywhere else still fails the coverage test until it has an expectation.
CONSOLE = "/console"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return dict(NO_RATE_LIMITS)


# --- part 1: the expectation table (DESIGN.md §9) ------------------------------------------


@dataclass(frozen=True)
class Public:
    """Served to anyone, with or without credentials: nothing is authenticated or audited."""

    name: str
    probe: bool = False  # readiness: 200 or 503 as its checks say, the same for every caller


@dataclass(frozen=True)
class Guarded:
    """A bearer-token route: who may call it, and what a caller of another tenant gets."""

    name: str  # the route name, under which refusals are audited (``<name>.refused``)
    allowed: frozenset[str]
    ok: int
    target: str | None = None  # the object in the path; None for a tenant-scoped collection
    missing: str | None = None  # the code of a missing object (404 unavailable)


DOCS = (Public("openapi"),)
EXPECTED: dict[tuple[str, str], Public | Guarded] = {
    ("GET", "/healthz"): Public("healthz"),
    ("GET", "/readyz"): Public("readyz", probe=True),
    ("GET", "/.well-known/oauth-protected-resource"): Public("well_known.protected_resource"),
    ("GET", "/metrics"): Public("metrics"),  # open unless DRAFTGATE_METRICS_TOKEN is set
    ("GET", "/openapi.json"): DOCS[0],
    ("HEAD", "/openapi.json"): DOCS[0],
    ("GET", "/v1/drafts"): Guarded("drafts.list", REVIEWER, 200),
    ("GET", "/v1/drafts/{draft_id}"): Guarded(
        "drafts.read", REVIEWER, 200, "draft", "DRAFT_UNAVAILABLE"
    ),
    ("POST", "/v1/drafts/{draft_id}/approvals"): Guarded(
        "approval", APPROVER, 201, "approvable", "DRAFT_UNAVAILABLE"
    ),
    ("POST", "/v1/drafts/{draft_id}/views"): Guarded(
        "draft_view", APPROVER, 204, "draft", "DRAFT_UNAVAILABLE"
    ),
    ("POST", "/v1/drafts/{draft_id}/narrow"): Guarded(
        "narrowing", APPROVER, 201, "narrowable", "DRAFT_UNAVAILABLE"
    ),
    ("POST", "/v1/drafts/{draft_id}/execute"): Guarded(
        "execution", APPROVER, 202, "executable", "DRAFT_UNAVAILABLE"
    ),
    ("GET", "/v1/executions/{execution_id}"): Guarded(
        "execution.read", REVIEWER, 200, "execution", "EXECUTION_UNAVAILABLE"
    ),
    ("GET", "/v1/audit/events"): Guarded("audit.query", AUDITOR, 200),
    ("GET", "/v1/audit/export"): Guarded("audit.export", AUDITOR, 200),
    ("GET", "/v1/audit/verify"): Guarded("audit.verify", AUDITOR, 200),
    ("GET", "/v1/audit/checkpoints"): Guarded("audit.checkpoints", AUDITOR, 200),
    ("GET", "/v1/traces/{trace_id}"): Guarded("trace", AUDITOR, 200, "trace", "TRACE_UNAVAILABLE"),
    # batch approval (docs/approvals.md): approvers sign one statement over several drafts
    ("POST", "/v1/approvals/batch/statement"): Guarded("approvals.batch_statement", APPROVER, 200),
    ("POST", "/v1/approvals/batch"): Guarded("approvals.batch", APPROVER, 201),
    # standing grants (docs/approvals.md): approvers sign them; they, auditors and admins list
    # them; their approver or an admin revokes one
    ("GET", "/v1/grants"): Guarded("grants.list", REVIEWER | ADMIN, 200),
    ("POST", "/v1/grants/statement"): Guarded("grants.statement", APPROVER, 200),
    ("POST", "/v1/grants"): Guarded("grants.create", APPROVER, 201),
    ("POST", "/v1/grants/{grant_id}/revoke"): Guarded(
        "grants.revoke", APPROVER | ADMIN, 200, "grant", "GRANT_UNAVAILABLE"
    ),
    # webhooks (docs/webhooks.md): the tenant's admin only
    ("POST", "/v1/webhooks"): Guarded("webhooks.create", ADMIN, 201),
    ("GET", "/v1/webhooks"): Guarded("webhooks.list", ADMIN, 200),
    ("DELETE", "/v1/webhooks/{endpoint_id}"): Guarded(
        "webhooks.remove", ADMIN, 200, "new_webhook", "WEBHOOK_UNAVAILABLE"
    ),
    ("POST", "/v1/webhooks/{endpoint_id}/test"): Guarded(
        "webhooks.test", ADMIN, 202, "new_webhook", "WEBHOOK_UNAVAILABLE"
    ),
    ("GET", "/v1/webhooks/{endpoint_id}/deliveries"): Guarded(
        "webhooks.deliveries", ADMIN, 200, "webhook", "WEBHOOK_UNAVAILABLE"
    ),
    # an approver's own credentials (docs/approvals.md, passkeys): approvers only
    ("GET", "/v1/me/credentials"): Guarded("me.credentials", APPROVER, 200),
    ("POST", "/v1/me/passkeys/registration-options"): Guarded(
        "passkey.registration_options", APPROVER, 200
    ),
    ("POST", "/v1/me/passkeys"): Guarded("passkey.enrolment", APPROVER, 201),
    ("POST", "/v1/me/key-enrolments"): Guarded("key.enrolment", APPROVER, 201),
    # administration (docs/approvals.md, admin): the tenant's admin only
    ("GET", "/v1/admin/approvers"): Guarded("admin.approvers", ADMIN, 200),
    ("GET", "/v1/admin/key-enrolments"): Guarded("admin.enrolments", ADMIN, 200),
    ("POST", "/v1/admin/key-enrolments/{enrolment_id}/approve"): Guarded(
        "admin.enrolment_approve", ADMIN, 200, "enrolment", "ENROLMENT_UNAVAILABLE"
    ),
    ("POST", "/v1/admin/key-enrolments/{enrolment_id}/reject"): Guarded(
        "admin.enrolment_reject", ADMIN, 200, "enrolment", "ENROLMENT_UNAVAILABLE"
    ),
    ("POST", "/v1/admin/keys"): Guarded("admin.key_register", ADMIN, 201),
    ("POST", "/v1/admin/keys/{key_id}/revoke"): Guarded(
        "admin.key_revoke", ADMIN, 200, "key", "KEY_UNAVAILABLE"
    ),
    ("POST", "/v1/admin/passkeys/{key_id}/revoke"): Guarded(
        "admin.passkey_revoke", ADMIN, 200, "passkey", "PASSKEY_UNAVAILABLE"
    ),
    ("GET", "/v1/admin/tokens"): Guarded("admin.tokens", ADMIN, 200),
    ("POST", "/v1/admin/tokens"): Guarded("admin.token_issue", ADMIN, 201),
    ("POST", "/v1/admin/tokens/{token_id}/revoke"): Guarded(
        "admin.token_revoke", ADMIN, 200, "token", "TOKEN_UNAVAILABLE"
    ),
}


def served_operations(app: Any) -> dict[tuple[str, str], str]:
    """(method, path) -> route name of everything the app routes, included routers too,
    but the console's (part 5)."""
    return {op: name for op, name in _all_operations(app).items() if not _console(op[1])}


def _console(path: str) -> bool:
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def _all_operations(app: Any) -> dict[tuple[str, str], str]:
    from fastapi import routing

    contexts = getattr(routing, "iter_route_contexts", None)
    routes = list(contexts(app.routes)) if contexts else list(app.routes)
    operations = {}
    for route in routes:
        path, methods = getattr(route, "path", None), getattr(route, "methods", None)
        if methods is None and isinstance(getattr(route, "route", route), Mount):
            methods = {"MOUNT"}  # a mounted app (the console's static files): every method
        assert path is not None, f"a route the matrix cannot read: {route!r}"
        assert methods, f"a route the matrix cannot read: {route!r}"
        for method in methods:
            operations[(method, path)] = str(route.name)
    return operations


def test_the_matrix_covers_every_route_the_app_serves(runtime):
    app = create_app(runtime, publisher=lambda task, args: None)
    served_ops = served_operations(app)

    uncovered = sorted(set(served_ops) - set(EXPECTED))
    stale = sorted(set(EXPECTED) - set(served_ops))
    assert not uncovered, f"routes the attack matrix has no expectation for: {uncovered}"
    assert not stale, f"expectations for routes the app no longer serves: {stale}"
    renamed = {op: name for op, name in served_ops.items() if EXPECTED[op].name != name}
    assert not renamed, f"routes whose name (and so refusal event) changed: {renamed}"
    documented = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    api_routes = {op for op, name in served_ops.items() if isinstance(EXPECTED[op], Guarded)}
    assert api_routes <= documented, "every /v1 route is in the OpenAPI document"
    assert documented <= set(served_ops), "the OpenAPI document lists only served routes"
    assert all(isinstance(r, APIRoute) for r in _api_routes(app)), "the /v1 routes are FastAPI's"


def _api_routes(app: Any) -> list[Any]:
    from fastapi import routing

    contexts = getattr(routing, "iter_route_contexts", None)
    routes = [getattr(r, "original_route", r) for r in (contexts(app.routes) if contexts else [])]
    return [r for r in routes if str(getattr(r, "path", "")).startswith("/v1")]


# --- part 1: the matrix --------------------------------------------------------------------


@dataclass(frozen=True)
class Reads:
    """The objects of a tenant that read-only cells share: a draft, its trace, an execution."""

    draft_id: str
    trace_id: str
    execution_id: str
    webhook_id: str


@dataclass
class Cell:
    method: str
    path: str
    expectation: Public | Guarded
    role: str
    tenant: str
    caller: Caller
    target_tenant: str
    target: str | None = None
    url: str = ""
    body: Any = None
    missing_url: str = ""
    missing_body: Any = None
    missing: str = ""

    def __str__(self) -> str:
        return f"{self.method} {self.path} as {self.role}@{self.tenant}"


def reads_of(world: World, tenant: str) -> Reads:
    trace_id = new_trace_id()
    draft_id = world.propose(tenant, trace_id=trace_id)["draft_id"]
    executed = world.approved_draft(tenant)
    return Reads(draft_id, trace_id, world.execution_of(tenant, executed), world.webhook(tenant))


@pytest.fixture
def world(runtime, demo, tmp_path) -> World:
    return World(runtime, demo, tmp_path / "keys")


@pytest.mark.full  # every route x caller x tenant: seconds
def test_every_route_answers_every_caller_and_tenant_as_the_design_says(runtime, world):
    reads = {tenant: reads_of(world, tenant) for tenant in TENANTS}
    app = create_app(runtime, publisher=lambda task, args: None)
    problems: list[str] = []
    cells = 0
    with api_client(runtime) as api:
        anonymous_ready = api.get("/readyz")
        assert anonymous_ready.status_code in (200, 503), anonymous_ready.text
        for (method, path), name in sorted(served_operations(app).items()):
            expectation = EXPECTED.get((method, path))
            if expectation is None:
                problems.append(f"{method} {path} ({name}): not in the matrix")
                continue
            for role in ROLES:
                for tenant in TENANTS:
                    cell = _cell(world, reads, method, path, expectation, role, tenant)
                    cells += 1
                    try:
                        _check(world, api, cell, anonymous_ready)
                    except AssertionError as failure:
                        problems.append(f"{cell}: {failure}")
    assert cells == len(EXPECTED) * len(ROLES) * len(TENANTS)
    assert not problems, f"{len(problems)} of {cells} cells disagree:\n" + "\n".join(problems)


def _cell(
    world: World,
    reads: dict[str, Reads],
    method: str,
    path: str,
    expectation: Public | Guarded,
    role: str,
    tenant: str,
) -> Cell:
    allowed = getattr(expectation, "allowed", APPROVER)
    revoked_role = next((r for r in ("admin", "approver") if r in allowed), "auditor")
    caller = world.caller(role, tenant, revoked_role=revoked_role)
    target_tenant = tenant if role in TENANTLESS else DEMO
    cell = Cell(method, path, expectation, role, tenant, caller, target_tenant, url=path)
    if not isinstance(expectation, Guarded):
        return cell
    cell.body = _body(world, cell, expectation.name)
    cell.missing_body = cell.body
    if expectation.target is None:
        return cell
    kind, of = expectation.target, reads[target_tenant]
    cell.target = {
        "draft": lambda: of.draft_id,
        "approvable": lambda: world.propose(target_tenant)["draft_id"],
        "narrowable": lambda: world.propose(target_tenant)["draft_id"],
        "executable": lambda: world.approved_draft(target_tenant),
        "execution": lambda: of.execution_id,
        "trace": lambda: of.trace_id,
        "webhook": lambda: of.webhook_id,
        "new_webhook": lambda: world.webhook(target_tenant),
        "enrolment": lambda: world.enrolment(target_tenant),
        "key": lambda: world.registered_key(target_tenant),
        "passkey": lambda: world.passkey(target_tenant),
        "token": lambda: world.token(target_tenant),
        "grant": lambda: world.grant(target_tenant),
    }[kind]()
    missing = MISSING.get(kind, missing_draft_id)()
    param = path[path.index("{") + 1 : path.index("}")]
    cell.url = path.replace("{" + param + "}", cell.target)
    cell.missing_url = path.replace("{" + param + "}", missing)
    cell.missing = missing
    if kind == "approvable":
        cell.body, cell.missing_body = _approval_bodies(world, cell, missing)
    if kind == "narrowable":
        cell.body, cell.missing_body = _narrowing_bodies(world, cell, missing)
    return cell


# Ids of the right shape that name nothing.
MISSING: dict[str, Callable[[], str]] = {
    "execution": missing_execution_id,
    "trace": new_trace_id,
    "webhook": lambda: "whk_" + secrets.token_hex(12),
    "new_webhook": lambda: "whk_" + secrets.token_hex(12),
    "enrolment": lambda: "enr_" + secrets.token_hex(12),
    "key": lambda: key_id_for(public_key_b64(generate_private_key())),
    "passkey": lambda: passkeys.key_id_for_credential(b64url(secrets.token_bytes(32))),
    "token": lambda: "tok_" + secrets.token_hex(8),
    "grant": lambda: "grt_" + secrets.token_hex(16),
}


def _body(world: World, cell: Cell, name: str) -> Any:
    """A valid body for the routes that take one, the same whoever sends it: what is refused
    is the caller, never the body."""
    fresh_key = lambda: public_key_b64(generate_private_key())  # noqa: E731
    if name == "passkey.enrolment":  # created for a challenge of the tenant's approver
        return {"credential": world.passkey_credential(cell.tenant)}
    if name in ("approvals.batch_statement", "approvals.batch"):  # a fresh draft of the tenant
        signer = cell.caller
        if cell.role != "approver":
            signer = world.tenants[cell.target_tenant].callers["approver"]
        draft_id = world.propose(str(signer.tenant))["draft_id"]
        if name == "approvals.batch_statement":
            return {"draft_ids": [draft_id]}
        return batch_body(world, signer, draft_id)
    if name == "grants.create":  # an approver's own; anyone else's a stolen one
        signer = cell.caller
        if cell.role != "approver":
            signer = world.tenants[cell.target_tenant].callers["approver"]
        return grant_body(signer)
    return {
        "webhooks.create": lambda: {"url": WEBHOOK_URL, "events": ["draft.approved"]},
        "key.enrolment": lambda: {"public_key": fresh_key(), "label": "browser key"},
        "admin.enrolment_reject": lambda: {"reason": "not a key this approver made"},
        "admin.key_register": lambda: {"approver": "bob", "public_key": fresh_key()},
        "grants.statement": lambda: {**GRANT_TERMS, "duration_seconds": 3_600},
        "draft_view": lambda: {"revision": 1, "seen": ["params"]},
        "admin.token_issue": lambda: {
            "subject": f"auditor-{secrets.token_hex(3)}",
            "role": "auditor",
        },
    }.get(name, lambda: None)()


def _approval_bodies(world: World, cell: Cell, missing: str) -> tuple[Any, Any]:
    """An approver signs in their own name and tenant; anyone else presents a valid approval
    of the target tenant's approver (a stolen body)."""
    assert cell.target is not None
    fields = world.draft_fields(cell.target)
    signer = cell.caller
    if cell.role == "approver":
        fields["tenant"] = cell.caller.tenant
    else:
        signer = world.tenants[cell.target_tenant].callers["approver"]
    return signed_body(signer, fields), signed_body(signer, {**fields, "draft_id": missing})


def _narrowing_bodies(world: World, cell: Cell, missing: str) -> tuple[Any, Any]:
    """The draft's amount lowered below every amount the world proposes (101 and up, so the
    narrowed draft twins no open one), and its next revision's approval signed as
    ``_approval_bodies`` signs (an approver's own, anyone else's a stolen one)."""
    assert cell.target is not None
    params = world.draft_params(cell.target)
    lower = params["amount"]["amount_minor"] % 100 + 1
    params["amount"] = {**params["amount"], "amount_minor": lower}
    fields = world.draft_fields(cell.target)
    fields |= {"revision": fields["revision"] + 1, "params_sha256": params_sha256(params)}
    signer = cell.caller
    if cell.role == "approver":
        fields["tenant"] = cell.caller.tenant
    else:
        signer = world.tenants[cell.target_tenant].callers["approver"]
    own = signed_body(signer, fields)
    made_up = signed_body(signer, {**fields, "draft_id": missing})
    return {"params": params, **own}, {"params": params, **made_up}


def _send(api: httpx.Client, cell: Cell, url: str, body: Any) -> httpx.Response:
    return api.request(cell.method, url, json=body, headers=cell.caller.headers)


def _check(world: World, api: httpx.Client, cell: Cell, anonymous_ready: httpx.Response) -> None:
    before = world.state()
    response = _send(api, cell, cell.url, cell.body)
    after, events = world.state(), world.events_since(before)
    expectation = cell.expectation
    if isinstance(expectation, Public):
        _check_public(cell, expectation, response, anonymous_ready)
        assert not events, f"a public route audited {[e.type for e in events]}"
        assert after.effects == before.effects, "a public route changed something"
        return
    refused = _refusal_expected(cell, expectation)
    if refused is None:
        _check_allowed(world, cell, expectation, response, before, after, events)
        return
    _check_refused(cell, response, refused, before, after, events)
    if expectation.target is not None:  # a real object refuses exactly like a missing one
        before = world.state()
        twin = _send(api, cell, cell.missing_url, cell.missing_body)
        twin_events = world.events_since(before)
        _check_refused(cell, twin, refused, before, world.state(), twin_events)
        own = _problem_without_instance(response, cell.target, cell.missing)
        assert _problem_without_instance(twin) == own, (
            f"the answer differs from a missing object's: {response.text} vs {twin.text}"
        )
        assert _shape(twin_events) == _shape(events)


def _check_public(
    cell: Cell, expectation: Public, response: httpx.Response, anonymous: httpx.Response
) -> None:
    if expectation.probe:
        assert (response.status_code, response.json()) == (
            anonymous.status_code,
            anonymous.json(),
        ), f"readiness depends on the caller: {response.status_code} {response.text}"
        return
    assert response.status_code == 200, f"{response.status_code} {response.text[:200]}"
    assert "www-authenticate" not in response.headers


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str
    event: str
    tenant: str  # whose chain records it
    actor: str


def _refusal_expected(cell: Cell, expectation: Guarded) -> Refusal | None:
    """What the design says this cell must be refused with, or None if it must be served."""
    if cell.role in UNAUTHENTICATED_ROLES:  # refused credentials: the default tenant's chain
        return Refusal(401, "UNAUTHENTICATED", "auth.refused", DEMO, "anonymous")
    assert cell.caller.tenant is not None
    refusal = f"{expectation.name}.refused"
    if cell.role not in expectation.allowed:
        return Refusal(403, "PERMISSION_DENIED", refusal, cell.caller.tenant, cell.caller.actor)
    if cell.caller.tenant != cell.target_tenant and expectation.missing is not None:
        return Refusal(404, expectation.missing, refusal, cell.caller.tenant, cell.caller.actor)
    return None


def _check_refused(
    cell: Cell,
    response: httpx.Response,
    refusal: Refusal,
    before: State,
    after: State,
    events: list[AuditEvent],
) -> None:
    assert response.status_code == refusal.status, f"{response.status_code} {response.text}"
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    problem = response.json()
    assert (problem["code"], problem["status"]) == (refusal.code, refusal.status), problem
    if refusal.status == 401:
        assert response.headers.get("www-authenticate", "").startswith("Bearer ")
        assert "resource_metadata=" in response.headers["www-authenticate"]  # RFC 9728 §5.1
    assert after.effects == before.effects, f"a refused request changed: {_diff(before, after)}"
    assert [e.type for e in events] == [refusal.event], (
        f"expected exactly one {refusal.event}, got {[(e.tenant, e.type) for e in events]}"
    )
    [event] = events
    assert (event.tenant, event.actor) == (refusal.tenant, refusal.actor)
    if refusal.event == "auth.refused":
        assert event.data["door"] == "http"
        if cell.caller.token:
            assert cell.caller.token not in json.dumps(event.data)
    else:
        assert event.data["error"]["code"] == refusal.code


def _check_allowed(
    world: World,
    cell: Cell,
    expectation: Guarded,
    response: httpx.Response,
    before: State,
    after: State,
    events: list[AuditEvent],
) -> None:
    assert response.status_code == expectation.ok, f"{response.status_code} {response.text}"
    refusals = [e.type for e in events if e.type.endswith(".refused")]
    assert not refusals, f"an answered request audited refusals: {refusals}"
    assert after.drafts.keys() == before.drafts.keys(), "a draft appeared or vanished"
    changed = {d for d in after.drafts if after.drafts[d] != before.drafts[d]}
    new_approvals, new_executions = (
        after.approvals - before.approvals,
        after.executions - before.executions,
    )
    expected_change = {"approval": "approved", "narrowing": "approved", "execution": "queued"}.get(
        expectation.name
    )
    if expectation.name == "approvals.batch":  # the one draft of the batch, approved
        assert [after.drafts[d][0] for d in changed] == ["approved"], _diff(before, after)
        assert len(new_approvals) == 1, _diff(before, after)
        assert not new_executions, _diff(before, after)
    elif expected_change is None:
        assert not changed, _diff(before, after)
        assert not new_approvals, _diff(before, after)
        assert not new_executions, _diff(before, after)
    else:
        assert changed == {cell.target}, f"drafts changed: {changed}"
        assert after.drafts[str(cell.target)][0] == expected_change
        assert len(new_approvals | new_executions) == 1, _diff(before, after)
    SUCCESS[expectation.name](world, cell, response, before)


def _ok_queue(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    ids = [draft["draft_id"] for draft in response.json()["drafts"]]
    assert ids, "the queue is empty"
    assert world.tenant_of_drafts(ids) == {cell.caller.tenant}, "another tenant's draft listed"


def _ok_draft(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    draft = response.json()
    assert (draft["draft_id"], draft["tenant"]) == (cell.target, cell.caller.tenant)
    assert (draft["statement_to_sign"] is not None) == (cell.role == "approver")


def _ok_approval(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["status"] == "approved"


def _ok_execution(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    accepted = response.json()
    assert accepted["status"] == "queued"
    assert world.state().executions - before.executions == {accepted["execution_id"]}


def _ok_execution_read(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["execution_id"] == cell.target


def _ok_events(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    tenants = {event["tenant"] for event in response.json()["events"]}
    assert tenants == {cell.caller.tenant}, f"events of {tenants}"


def _ok_export(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.headers["content-type"].split(";")[0] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert {line["tenant"] for line in lines} == {cell.caller.tenant}


def _ok_verify(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    report = response.json()
    assert report["ok"] is True, report
    assert report["head"]["seq"] == before.heads[str(cell.caller.tenant)], report


def _ok_checkpoints(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["tenant"] == cell.caller.tenant


def _ok_trace(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    trace = response.json()
    assert trace["trace_id"] == cell.target
    assert trace["drafts"], "the trace names no draft"
    assert world.tenant_of_drafts([d["draft_id"] for d in trace["drafts"]]) == {cell.tenant}


def _in_own_tenant(
    world: World, model: Any, ids: list[str], cell: Cell, *, empty_ok: bool = False
) -> None:
    assert ids or empty_ok, "an empty answer"
    with Session(world.runtime.engine) as session:
        found = session.scalars(select(model.tenant).where(col(model.id).in_(ids))).all()
    assert len(found) == len(set(ids)), f"ids that are not rows: {ids}"
    assert set(found) <= {cell.caller.tenant}, f"another tenant's rows listed: {set(found)}"


def _ok_webhook_created(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    created = response.json()
    assert created["secret"], "the signing secret is shown once, on creation"
    _in_own_tenant(world, WebhookEndpoint, [created["endpoint_id"]], cell)


def _ok_webhooks(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    endpoints = response.json()["endpoints"]
    assert all("secret" not in e for e in endpoints), "a listed endpoint shows its secret"
    _in_own_tenant(world, WebhookEndpoint, [e["endpoint_id"] for e in endpoints], cell)


def _ok_webhook_target(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["endpoint_id"] == cell.target


def _ok_webhook_test(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    delivery = response.json()["delivery_id"]
    with Session(world.runtime.engine) as session:
        row = session.get(WebhookDelivery, delivery)
    assert row is not None, delivery
    assert row.endpoint_id == cell.target, delivery


def _ok_credentials(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["approver"] == cell.caller.subject


def _ok_registration(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert response.json()["options"]["challenge"], response.text


def _ok_enrolled(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    enrolment = response.json()
    assert (enrolment["approver"], enrolment["status"]) == (cell.caller.subject, "pending")
    _in_own_tenant(world, KeyEnrolment, [enrolment["enrolment_id"]], cell)


def _ok_approvers(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    names = {a["approver"] for a in response.json()["approvers"]}
    assert {"alice", "bob"} <= names, names


def _ok_enrolments(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    ids = [e["enrolment_id"] for e in response.json()["enrolments"]]
    _in_own_tenant(world, KeyEnrolment, ids, cell, empty_ok=True)


def _ok_decided(status: str) -> Callable[[World, Cell, httpx.Response, State], None]:
    def check(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
        decided = response.json()
        assert (decided["enrolment_id"], decided["status"]) == (cell.target, status)

    return check


def _ok_key_registered(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    key = response.json()
    assert (key["approver"], key["key_id"]) == ("bob", key_id_for(cell.body["public_key"]))


def _ok_revoked(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    revoked = response.json()
    assert revoked.get("key_id", revoked.get("token_id")) == cell.target, revoked
    assert revoked.get("revoked_at") or revoked.get("status") == "revoked", revoked


def _ok_tokens(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    listed = response.json()["tokens"]
    assert listed, "no token listed"
    assert {t["tenant"] for t in listed} == {cell.caller.tenant}
    assert not any(cell.caller.token in json.dumps(t) for t in listed), "a secret is listed"


def _ok_token_issued(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    issued = response.json()
    assert (issued["tenant"], issued["role"]) == (cell.caller.tenant, "auditor"), issued
    assert issued["token"], "the secret is in this answer"


def _ok_batch_statement(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    statement = response.json()["statement"]
    assert (statement["tenant"], statement["approver"]) == (cell.caller.tenant, cell.caller.subject)


def _ok_batch(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    assert [d["status"] for d in response.json()["drafts"]] == ["approved"]


def _ok_grants(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    ids = [grant["grant_id"] for grant in response.json()["grants"]]
    with Session(world.runtime.engine) as session:
        tenants = set(session.scalars(select(Grant.tenant).where(col(Grant.id).in_(ids))).all())
    assert tenants <= {cell.caller.tenant}, f"grants of {tenants} listed"


def _ok_grant_statement(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    statement = response.json()["statement"]
    assert (statement["tenant"], statement["approver"]) == (cell.caller.tenant, cell.caller.subject)


def _ok_grant_created(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    created = response.json()
    assert (created["approver"], created["status"]) == (cell.caller.subject, "active")


def _ok_grant_revoked(world: World, cell: Cell, response: httpx.Response, before: State) -> None:
    revoked = response.json()
    assert (revoked["grant_id"], revoked["status"]) == (cell.target, "revoked")


SUCCESS: dict[str, Callable[[World, Cell, httpx.Response, State], None]] = {
    "drafts.list": _ok_queue,
    "drafts.read": _ok_draft,
    "approval": _ok_approval,
    "narrowing": _ok_approval,
    "draft_view": lambda world, cell, response, before: None,  # 204: nothing to read
    "execution": _ok_execution,
    "execution.read": _ok_execution_read,
    "audit.query": _ok_events,
    "audit.export": _ok_export,
    "audit.verify": _ok_verify,
    "audit.checkpoints": _ok_checkpoints,
    "trace": _ok_trace,
    "webhooks.create": _ok_webhook_created,
    "webhooks.list": _ok_webhooks,
    "webhooks.remove": _ok_webhook_target,
    "webhooks.test": _ok_webhook_test,
    "webhooks.deliveries": _ok_webhook_target,
    "me.credentials": _ok_credentials,
    "passkey.registration_options": _ok_registration,
    "passkey.enrolment": _ok_enrolled,
    "key.enrolment": _ok_enrolled,
    "admin.approvers": _ok_approvers,
    "admin.enrolments": _ok_enrolments,
    "admin.enrolment_approve": _ok_decided("approved"),
    "admin.enrolment_reject": _ok_decided("rejected"),
    "admin.key_register": _ok_key_registered,
    "admin.key_revoke": _ok_revoked,
    "admin.passkey_revoke": _ok_revoked,
    "admin.tokens": _ok_tokens,
    "admin.token_issue": _ok_token_issued,
    "admin.token_revoke": _ok_revoked,
    "approvals.batch_statement": _ok_batch_statement,
    "approvals.batch": _ok_batch,
    "grants.list": _ok_grants,
    "grants.statement": _ok_grant_statement,
    "grants.create": _ok_grant_created,
    "grants.revoke": _ok_grant_revoked,
}


def _problem_without_instance(
    response: httpx.Response, target: str | None = None, missing: str = ""
) -> tuple[int, dict[str, Any]]:
    """The problem but its ``instance``; with ``target``, its id spelled as the missing one's
    (a detail may echo the id the caller sent, which tells the caller nothing new)."""
    text = response.text if target is None else response.text.replace(target, missing)
    body = dict(json.loads(text))
    body.pop("instance", None)
    return response.status_code, body


def _shape(events: list[AuditEvent]) -> list[tuple[str, str, str, Any]]:
    return [(e.tenant, e.type, e.actor, (e.data.get("error") or {}).get("code")) for e in events]


def _diff(before: State, after: State) -> str:
    drafts = {
        d: (before.drafts.get(d), after.drafts.get(d))
        for d in set(before.drafts) | set(after.drafts)
        if before.drafts.get(d) != after.drafts.get(d)
    }
    return (
        f"drafts {drafts}, approvals +{sorted(after.approvals - before.approvals)}, "
        f"executions +{sorted(after.executions - before.executions)}, "
        f"outbox {before.outbox}->{after.outbox}"
    )


# --- part 2: forged and replayed approvals ---------------------------------------------------

FULL = os.environ.get("DRAFTGATE_ATTACK_FULL") == "1"
VARIANTS: dict[str, Callable[[Lab], Attempt]] = {}


def variant(name: str) -> Callable[[Callable[[Lab], Attempt]], Callable[[Lab], Attempt]]:
    def register(build: Callable[[Lab], Attempt]) -> Callable[[Lab], Attempt]:
        assert name not in VARIANTS, name
        VARIANTS[name] = build
        return build

    return register


def later(lab: Lab, signer: Caller, draft_id: str) -> Callable[[], httpx.Response]:
    """The legitimate decision that must still be accepted after the refusal."""
    return lambda: lab.decide(signer, draft_id)


def by_alice(lab: Lab, draft_id: str, body: Any, *codes: str, raw: bytes | None = None) -> Attempt:
    """Alice's token presents ``body`` on an open draft she may still approve afterwards."""
    return Attempt(
        draft_id,
        lab.alice,
        refused_with(*codes),
        body,
        raw=raw,
        control=later(lab, lab.alice, draft_id),
    )


# --- replays of signatures that were valid somewhere ---


@variant("replay/an-accepted-approval-on-another-draft")
def _(lab: Lab) -> Attempt:
    used, target = lab.draft(), lab.draft()
    return by_alice(lab, target, lab.accepted(lab.alice, used), "STATEMENT_MISMATCH")


@variant("replay/an-accepted-approval-on-another-draft-its-draft-id-edited")
def _(lab: Lab) -> Attempt:
    used, target = lab.draft(), lab.draft()
    body = copy.deepcopy(lab.accepted(lab.alice, used))
    body["statement"]["draft_id"] = target
    return by_alice(lab, target, body, "SIGNATURE_INVALID", "STATEMENT_MISMATCH")


@variant("replay/an-accepted-approval-on-the-next-revision")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft(approvers=2)
    body = lab.accepted(lab.alice, draft_id)  # 1 of 2: the draft stays open to revision
    assert lab.world.revise(DEMO, draft_id, order=TWO_APPROVER_ORDER)["revision"] == 2
    return by_alice(lab, draft_id, body, "STALE_REVISION")  # alice may sign revision 2


@variant("replay/an-accepted-approval-on-the-next-revision-its-revision-edited")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft(approvers=2)
    body = copy.deepcopy(lab.accepted(lab.alice, draft_id))
    lab.world.revise(DEMO, draft_id, order=TWO_APPROVER_ORDER)
    body["statement"]["revision"] = 2
    return by_alice(lab, draft_id, body, "SIGNATURE_INVALID", "STATEMENT_MISMATCH")


@variant("replay/an-approval-signed-before-a-rejection")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    body = lab.body(lab.alice, draft_id)
    lab.accepted(lab.bob, draft_id, decision=Decision.REJECT, reason="duplicate")
    refused = refused_with("DRAFT_NOT_OPEN")
    return Attempt(draft_id, lab.alice, refused, body, execute_code="DRAFT_REJECTED")


@variant("replay/the-rejection-itself")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    body = lab.accepted(lab.bob, draft_id, decision=Decision.REJECT, reason="duplicate")
    refused = refused_with("DRAFT_NOT_OPEN", "ALREADY_SIGNED")
    return Attempt(draft_id, lab.bob, refused, body, execute_code="DRAFT_REJECTED")


def _second_decision(lab: Lab, *, same_body: bool, **kwargs: Any) -> Attempt:
    draft_id = lab.draft(approvers=2)
    first = lab.accepted(lab.alice, draft_id)
    body = first if same_body else lab.body(lab.alice, draft_id, **kwargs)
    return Attempt(
        draft_id,
        lab.alice,
        refused_with("ALREADY_SIGNED"),
        body,
        control=later(lab, lab.bob, draft_id),  # the second approver still can
    )


variant("replay/the-same-approval-twice")(lambda lab: _second_decision(lab, same_body=True))
variant("replay/approving-twice-with-a-fresh-signature")(
    lambda lab: _second_decision(lab, same_body=False)
)
variant("replay/rejecting-what-one-approved")(
    lambda lab: _second_decision(lab, same_body=False, decision=Decision.REJECT, reason="no")
)


def _like_a_missing_draft(lab: Lab, attempt: Attempt, missing: str, twin_body: Any) -> Attempt:
    """A foreign caller must get exactly what the same request for a missing draft gets."""
    twin = lab.post(attempt.caller, missing, twin_body)
    answer = (twin.status_code, twin.json()["code"])
    assert answer in attempt.refused, twin.text
    attempt.refused = frozenset({answer})
    return attempt


@variant("cross-tenant/demo-alices-approval-presented-by-acmes-alice")
def _(lab: Lab) -> Attempt:
    draft_id, missing = lab.draft(), missing_draft_id()
    fields = lab.world.draft_fields(draft_id)
    attempt = Attempt(
        draft_id,
        lab.acme_alice,
        refused_with("STATEMENT_MISMATCH", "DRAFT_UNAVAILABLE", "KEY_NOT_OWNED"),
        lab.body(lab.alice, draft_id),
        event_tenant=ACME,
        control=later(lab, lab.alice, draft_id),
    )
    twin = signed_body(lab.alice, {**fields, "draft_id": missing})
    return _like_a_missing_draft(lab, attempt, missing, twin)


@variant("cross-tenant/acmes-alice-signs-the-demo-draft-in-her-own-tenant")
def _(lab: Lab) -> Attempt:
    draft_id, missing = lab.draft(), missing_draft_id()
    fields = {**lab.world.draft_fields(draft_id), "tenant": ACME}
    attempt = Attempt(
        draft_id,
        lab.acme_alice,
        refused_with("DRAFT_UNAVAILABLE"),
        signed_body(lab.acme_alice, fields),
        event_tenant=ACME,
        control=later(lab, lab.alice, draft_id),
    )
    twin = signed_body(lab.acme_alice, {**fields, "draft_id": missing})
    return _like_a_missing_draft(lab, attempt, missing, twin)


# --- who signs: tokens, keys, maker and checker ---


@variant("identity/bobs-signed-statement-with-alices-token")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    return by_alice(lab, draft_id, lab.body(lab.bob, draft_id), "APPROVER_MISMATCH")


@variant("identity/alices-statement-naming-and-signed-with-bobs-key")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    statement = lab.statement(lab.alice, draft_id, key_id=lab.bob.key_id)
    return by_alice(lab, draft_id, signed_by(lab.bob.key_file, statement), "KEY_NOT_OWNED")


@variant("identity/alices-key-id-but-bobs-signature")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    statement = lab.statement(lab.alice, draft_id)
    return by_alice(lab, draft_id, signed_by(lab.bob.key_file, statement), "SIGNATURE_INVALID")


@variant("identity/a-key-registered-to-nobody")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    stray = Caller("approver", DEMO, lab.alice.token, "alice", lab.world.new_key_file("stray"))
    return by_alice(lab, draft_id, lab.body(stray, draft_id), "KEY_NOT_OWNED")


@variant("identity/the-key-of-acmes-alice")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    stolen = Caller("approver", DEMO, lab.alice.token, "alice", lab.acme_alice.key_file)
    return by_alice(lab, draft_id, lab.body(stolen, draft_id), "KEY_NOT_OWNED")


@variant("identity/a-revoked-key")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    carol = lab.world.approver(DEMO, "carol-" + secrets.token_hex(3))
    body = lab.body(carol, draft_id)
    lab.world.revoke_key(carol)
    control = later(lab, lab.alice, draft_id)
    return Attempt(draft_id, carol, refused_with("KEY_REVOKED"), body, control=control)


@variant("identity/a-revoked-token-with-an-active-key")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    dave = lab.world.approver(DEMO, "dave-" + secrets.token_hex(3))
    revoked = lab.world.caller("revoked", DEMO)
    return Attempt(
        draft_id,
        revoked,
        refused_with("UNAUTHENTICATED"),
        lab.body(dave, draft_id),
        event="auth.refused",
        control=later(lab, dave, draft_id),
    )


def _maker(subject: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        maker = lab.world.approver(DEMO, subject)  # an approver token and key of that name
        body, control = lab.body(maker, draft_id), later(lab, lab.alice, draft_id)
        return Attempt(draft_id, maker, refused_with("SELF_APPROVAL"), body, control=control)

    return build


variant("maker-checker/the-end-user-it-was-proposed-for")(_maker("cust-ada"))
variant("maker-checker/the-proposing-agents-subject")(_maker("support-agent"))


@variant("state/an-expired-draft")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    body = lab.body(lab.alice, draft_id)
    lab.world.expire(draft_id)
    refused = refused_with("DRAFT_EXPIRED")
    return Attempt(
        draft_id, lab.alice, refused, body, may_expire=True, execute_code="DRAFT_EXPIRED"
    )


# --- what is signed: one member off, validly signed by alice; or edited after she signed ---

OTHER_DIGEST = hashlib.sha256(canonical_json({"amount": {"amount_minor": 99_999}})).hexdigest()
# member -> (its wrong value given the true statement, the documented refusal)
WRONG: dict[str, tuple[Callable[[Lab, dict[str, Any]], Any], str]] = {
    "tenant": (lambda lab, s: ACME, "STATEMENT_MISMATCH"),
    "draft_id": (lambda lab, s: missing_draft_id(), "STATEMENT_MISMATCH"),
    "revision": (lambda lab, s: s["revision"] + 1, "STALE_REVISION"),  # not current
    "action": (lambda lab, s: "cancel_order", "STATEMENT_MISMATCH"),
    "contract_version": (lambda lab, s: s["contract_version"] + 1, "STATEMENT_MISMATCH"),
    "params_sha256": (lambda lab, s: OTHER_DIGEST, "STATEMENT_MISMATCH"),
    "approver": (lambda lab, s: "bob", "APPROVER_MISMATCH"),
    "key_id": (lambda lab, s: lab.bob.key_id, "KEY_NOT_OWNED"),
    "type": (lambda lab, s: "draftgate.approval.v2", "INVALID_ARGUMENT"),
}
# A revision ahead of the draft's is "not the current one"; the design names no code for
# "future" rather than "stale", so either is accepted.
ALSO = {"revision": ("STATEMENT_MISMATCH",)}


def _resigned(member: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        statement = lab.statement(lab.alice, draft_id)
        wrong, code = WRONG[member]
        statement[member] = wrong(lab, statement)
        body = signed_by(lab.alice.key_file, statement)
        return by_alice(lab, draft_id, body, code, *ALSO.get(member, ()))

    return build


def _edited(member: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        body = lab.body(lab.alice, draft_id)
        wrong, code = WRONG[member]
        body["statement"][member] = wrong(lab, body["statement"])
        return by_alice(lab, draft_id, body, "SIGNATURE_INVALID", code, *ALSO.get(member, ()))

    return build


for _member in WRONG:
    variant(f"resigned/{_member}")(_resigned(_member))
    variant(f"edited-after-signing/{_member}")(_edited(_member))


@variant("edited-after-signing/decision")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    body = lab.body(lab.alice, draft_id)
    body["statement"] |= {"decision": "reject", "reason": "edited after signing"}
    return by_alice(lab, draft_id, body, "SIGNATURE_INVALID")


@variant("edited-after-signing/issued_at")
def _(lab: Lab) -> Attempt:
    draft_id = lab.draft()
    body = lab.body(lab.alice, draft_id)  # still fresh: only the signature can tell
    body["statement"]["issued_at"] = body["statement"]["issued_at"].replace("Z", ".000001Z")
    return by_alice(lab, draft_id, body, "SIGNATURE_INVALID")


ISSUED_AT: dict[str, timedelta | str] = {
    "ten-minutes-ago": timedelta(minutes=-10),
    "ten-minutes-ahead": timedelta(minutes=10),
    "just-past-the-skew": timedelta(seconds=-301),
    "just-ahead-of-the-skew": timedelta(seconds=310),
    "the-epoch": "1970-01-01T00:00:00Z",
    "year-1": "0001-01-01T00:00:00Z",
    "year-9999": "9999-12-31T23:59:59.999999Z",
}


def _stale(issued_at: timedelta | str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        if isinstance(issued_at, timedelta):
            body = lab.body(lab.alice, draft_id, issued_at=utcnow() + issued_at)
        else:
            statement = lab.statement(lab.alice, draft_id) | {"issued_at": issued_at}
            body = signed_by(lab.alice.key_file, statement)
        return by_alice(lab, draft_id, body, "STATEMENT_STALE")

    return build


for _name, _when in ISSUED_AT.items():
    variant(f"resigned/issued-at-{_name}")(_stale(_when))


# --- the signature itself ---

BITS = range(512) if FULL else (0, 255, 256, 511)  # the first and last bit of R and of S
SIGNATURES: dict[str, tuple[Callable[[Lab, str], str], tuple[str, ...]]] = {
    **{
        f"bit-{bit}-flipped": (
            (lambda lab, sig, bit=bit: flip_bit(sig, bit)),
            ("SIGNATURE_INVALID",),
        )
        for bit in BITS
    },
    "s-plus-l-malleated": (lambda lab, sig: s_plus_l(sig), ("SIGNATURE_INVALID",)),
    "padding-bits-set": (
        lambda lab, sig: padding_bits_set(sig),
        ("SIGNATURE_INVALID", "INVALID_ARGUMENT"),
    ),
    "all-zero": (lambda lab, sig: "A" * 86, ("SIGNATURE_INVALID",)),
    "of-the-empty-message": (
        lambda lab, sig: signed_by(lab.alice.key_file, {}, message=b"")["signature"],
        ("SIGNATURE_INVALID",),
    ),
    "of-another-drafts-statement": (
        lambda lab, sig: lab.body(lab.alice, lab.draft())["signature"],
        ("SIGNATURE_INVALID",),
    ),
}


def _tampered(name: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        body = lab.body(lab.alice, draft_id)
        tamper, codes = SIGNATURES[name]
        body["signature"] = tamper(lab, body["signature"])
        return by_alice(lab, draft_id, body, *codes)

    return build


for _name in SIGNATURES:
    variant(f"signature/{_name}")(_tampered(_name))


# --- the bytes alice signed: anything but JCS(statement) ---


def _floats(statement: dict[str, Any]) -> bytes:
    numbers = {k: float(v) for k, v in statement.items() if type(v) is int}
    return json.dumps(statement | numbers, sort_keys=True, separators=(",", ":")).encode()


def _reversed(statement: dict[str, Any]) -> bytes:
    return json.dumps(dict(reversed(statement.items())), separators=(",", ":")).encode()


SPELLINGS: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "python-json-dumps": lambda s: json.dumps(s).encode(),
    "sorted-with-spaces": lambda s: json.dumps(s, sort_keys=True).encode(),
    "reversed-keys-compact": _reversed,
    "pretty-printed": lambda s: json.dumps(s, sort_keys=True, indent=2).encode(),
    "unicode-escaped": lambda s: escaped_json(s).encode(),
    "numbers-as-floats": _floats,
    "trailing-newline": lambda s: canonical_json(s) + b"\n",
    "utf8-byte-order-mark": lambda s: b"\xef\xbb\xbf" + canonical_json(s),
}


def _spelled(spelling: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        statement = lab.statement(lab.alice, draft_id)
        message = SPELLINGS[spelling](statement)
        assert message != canonical_json(statement)
        body = signed_by(lab.alice.key_file, statement, message=message)
        return by_alice(lab, draft_id, body, "SIGNATURE_INVALID")

    return build


for _spelling in SPELLINGS:
    variant(f"signed-bytes/{_spelling}")(_spelled(_spelling))


# --- lookalike values, validly signed: the server compares exactly, never "close enough" ---

ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x660 + n) for n in range(10)))
LOOKALIKES: dict[str, tuple[str, Callable[[dict[str, Any]], Any], str]] = {
    "approver-with-a-cyrillic-a": ("approver", lambda s: "\u0430lice", "APPROVER_MISMATCH"),
    "approver-in-fullwidth": ("approver", lambda s: "ａｌｉｃｅ", "APPROVER_MISMATCH"),  # noqa: RUF001
    "approver-with-a-zero-width-space": ("approver", lambda s: "alice\u200b", "APPROVER_MISMATCH"),
    "approver-in-upper-case": ("approver", lambda s: "ALICE", "APPROVER_MISMATCH"),
    "tenant-with-a-cyrillic-e": ("tenant", lambda s: "d\u0435mo", "STATEMENT_MISMATCH"),
    "action-with-a-zero-width-joiner": ("action", lambda s: "re\u200dfund", "STATEMENT_MISMATCH"),
    "digest-in-upper-case-hex": (
        "params_sha256",
        lambda s: s["params_sha256"].upper(),
        "INVALID_ARGUMENT",
    ),
    "key-id-in-upper-case": ("key_id", lambda s: s["key_id"].upper(), "KEY_NOT_OWNED"),
    "draft-id-in-upper-case-hex": (
        "draft_id",
        lambda s: "dft_" + s["draft_id"][4:].upper(),
        "INVALID_ARGUMENT",
    ),
    "issued-at-in-arabic-indic-digits": (
        "issued_at",
        lambda s: s["issued_at"].translate(ARABIC_INDIC),
        "INVALID_ARGUMENT",
    ),
    "issued-at-with-an-offset-not-z": (
        "issued_at",
        lambda s: s["issued_at"].replace("Z", "+00:00"),
        "INVALID_ARGUMENT",
    ),
}


def _lookalike(name: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        statement = lab.statement(lab.alice, draft_id)
        member, value, code = LOOKALIKES[name]
        statement[member] = value(statement)
        return by_alice(lab, draft_id, signed_by(lab.alice.key_file, statement), code)

    return build


for _name in LOOKALIKES:
    variant(f"lookalike/{_name}")(_lookalike(_name))


# --- the shape of the statement and of the body (all INVALID_ARGUMENT) --------------------
# docs/decisions/signed-statement-refuses-null.md, docs/decisions/duplicate-member-names-refused.md


def _signed_with(lab: Lab, statement: dict[str, Any], **members: Any) -> tuple[Any, None]:
    return signed_by(lab.alice.key_file, statement | members), None


def _without_type(lab: Lab, statement: dict[str, Any]) -> tuple[Any, None]:
    return signed_by(lab.alice.key_file, {k: v for k, v in statement.items() if k != "type"}), None


def _text(lab: Lab, statement: dict[str, Any], old: str, new: str) -> tuple[None, bytes]:
    """Alice's valid body as JSON text, with ``old`` spelled ``new``."""
    text = json.dumps(signed_by(lab.alice.key_file, statement))
    assert old in text
    return None, text.replace(old, new, 1).encode()


def _as_jcs_text(lab: Lab, statement: dict[str, Any]) -> tuple[Any, None]:
    signature = signed_by(lab.alice.key_file, statement)["signature"]
    return {"statement": canonical_json(statement).decode(), "signature": signature}, None


def _two_signatures(lab: Lab, statement: dict[str, Any]) -> tuple[Any, None]:
    signature = signed_by(lab.alice.key_file, statement)["signature"]
    return {"statement": statement, "signature": [signature, signature]}, None


def _lone_surrogate(lab: Lab, statement: dict[str, Any]) -> tuple[None, bytes]:
    rejection = statement | {"decision": "reject", "reason": "x"}
    text = json.dumps({"statement": rejection, "signature": "A" * 86})
    return None, text.replace('"reason": "x"', '"reason": "\\ud800"').encode()


SHAPES: dict[str, Callable[[Lab, dict[str, Any]], tuple[Any, bytes | None]]] = {
    "an-extra-signed-member": lambda lab, s: _signed_with(lab, s, comment="looks fine"),
    "a-signed-reason-on-an-approval": lambda lab, s: _signed_with(lab, s, reason="why not"),
    "a-signed-null-key-id": lambda lab, s: _signed_with(lab, s, key_id=None),
    "a-signed-null-reason": lambda lab, s: _signed_with(lab, s, reason=None),
    "no-type-member": _without_type,
    "revision-as-true": lambda lab, s: _signed_with(lab, s, revision=True),
    "revision-sent-as-1-point-0": lambda lab, s: _text(
        lab, s, f'"revision": {s["revision"]}', f'"revision": {s["revision"]}.0'
    ),
    "a-lone-surrogate-in-a-reason": _lone_surrogate,
    "the-statement-as-its-jcs-text": _as_jcs_text,
    "two-signatures": _two_signatures,
    # RFC 8785 canonicalises I-JSON (RFC 7493 §2.3: no duplicate member names); a body that
    # says "reject" to a first-wins parser and "approve" to a last-wins one is ambiguous.
    "decision-given-twice": lambda lab, s: _text(
        lab, s, '"decision": "approve"', '"decision": "reject", "decision": "approve"'
    ),
}


def _shaped(name: str) -> Callable[[Lab], Attempt]:
    def build(lab: Lab) -> Attempt:
        draft_id = lab.draft()
        body, raw = SHAPES[name](lab, lab.statement(lab.alice, draft_id))
        return by_alice(lab, draft_id, body, "INVALID_ARGUMENT", raw=raw)

    return build


for _name in SHAPES:
    variant(f"shape/{_name}")(_shaped(_name))


# --- the tests of part 2 ---


@pytest.fixture(scope="module")
def lab(sqlite_template, tmp_path_factory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("forgeries")
    with module_world(sqlite_template, root) as world, api_client(world.runtime) as api:
        yield Lab(world, api)


def test_the_catalogue_has_every_family_of_forgery():
    families = {name.split("/")[0] for name in VARIANTS}
    assert families == {
        "replay",
        "cross-tenant",
        "identity",
        "maker-checker",
        "state",
        "resigned",
        "edited-after-signing",
        "signature",
        "signed-bytes",
        "lookalike",
        "shape",
    }
    edited = {name.split("/")[1] for name in VARIANTS if name.startswith("edited-after-signing/")}
    assert {*DESIGN_MEMBERS, "key_id", "type"} <= edited, "every signed member, edited"
    assert len(VARIANTS) >= 10


# The members of the statement (DESIGN.md §4) that the brief asks to see edited one by one.
DESIGN_MEMBERS = {
    "tenant",
    "draft_id",
    "revision",
    "action",
    "contract_version",
    "params_sha256",
    "decision",
    "approver",
    "issued_at",
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_forged_or_replayed_approval_is_refused_audited_and_executes_nothing(lab, name):
    attempt = VARIANTS[name](lab)
    before = lab.world.state()

    response = attempt.send(lab.api)

    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.text
    answer = (response.status_code, response.json()["code"])
    assert answer in attempt.refused, f"{answer}, expected one of {sorted(attempt.refused)}"
    after = lab.world.state()
    _assert_nothing_recorded(attempt, before, after)
    _assert_audited_once(lab, attempt, answer[1], before)
    _assert_nothing_executes(lab, attempt)
    if attempt.control is not None:  # the refusal was the forgery's, not the draft's
        control = attempt.control()
        assert control.status_code == 201, f"the legitimate decision afterwards: {control.text}"


def _assert_nothing_recorded(attempt: Attempt, before: State, after: State) -> None:
    assert after.approvals == before.approvals, "an approval was recorded"
    assert (after.executions, after.outbox) == (before.executions, before.outbox)
    assert after.drafts.keys() == before.drafts.keys()
    changed = {
        d: (before.drafts[d], now) for d, now in after.drafts.items() if before.drafts[d] != now
    }
    if attempt.may_expire and changed:  # deny by default may record the expiry it found
        [(draft_id, (was, now))] = changed.items()
        assert (draft_id, now) == (attempt.draft_id, ("expired", was[1]))
    else:
        assert not changed, f"drafts changed: {changed}"


def _assert_audited_once(lab: Lab, attempt: Attempt, code: str, before: State) -> None:
    events = lab.world.events_since(before)
    assert [(e.tenant, e.type) for e in events] == [(attempt.event_tenant, attempt.event)]
    [event] = events
    if attempt.event == "auth.refused":
        assert (event.actor, event.data["door"]) == ("anonymous", "http")
        return
    assert (event.actor, event.draft_id) == (attempt.caller.actor, attempt.draft_id)
    assert event.data["error"]["code"] == code


def _assert_nothing_executes(lab: Lab, attempt: Attempt) -> None:
    before = lab.world.state()
    response = lab.api.post(f"/v1/drafts/{attempt.draft_id}/execute", headers=lab.alice.headers)
    assert (response.status_code, response.json()["code"]) == (409, attempt.execute_code), (
        response.text
    )
    after = lab.world.state()
    assert (after.executions, after.outbox) == (before.executions, before.outbox)
    assert [e.type for e in lab.world.events_since(before)] == ["execution.refused"]


def test_how_a_body_is_spelled_in_transit_does_not_matter(lab):
    """The control for the signed-bytes family: the server canonicalises what it parsed, so a
    body sent escaped, reordered and indented is accepted when JCS(statement) was signed.
    The refusals above are about the bytes that were signed, not about the request's text."""
    draft_id = lab.draft()
    body = lab.body(lab.alice, draft_id)
    statement = dict(reversed(body["statement"].items()))
    raw = '{\n  "signature" : "%s",\n  "statement" :\n    %s\n}' % (  # noqa: UP031
        body["signature"],
        escaped_json(statement),
    )

    response = Attempt(draft_id, lab.alice, frozenset(), raw=raw.encode()).send(lab.api)

    assert response.status_code == 201, response.text
    assert response.json()["status"] == "approved"


# --- part 3: what the API does not serve -----------------------------------------------------

UNSERVED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def test_a_method_or_path_the_api_does_not_serve_answers_a_problem(runtime, world):
    """DESIGN.md §6: "The HTTP API returns RFC 9457 problem+json bodies with the same code
    and retryable fields". Whatever the API does not route (another method on a /v1 path, an
    unknown /v1 path) must say so in that shape too, and must not leak anything either way."""
    app = create_app(runtime, publisher=lambda task, args: None)
    served_ops = served_operations(app)
    paths = {path for _, path in served_ops if path.startswith("/v1")}
    probes = [
        (method, path.replace("{draft_id}", missing_draft_id()))
        for path in sorted(paths)
        for method in UNSERVED_METHODS
        if (method, path) not in served_ops
    ]
    probes.append(("GET", "/v1/nothing-here"))
    agent = world.caller("agent", DEMO)
    wrong = []
    with api_client(runtime) as api:
        for method, path in probes:
            response = api.request(
                method,
                path.format(
                    execution_id=missing_execution_id(),
                    trace_id=new_trace_id(),
                    **{
                        f"{kind}_id": MISSING[kind]()
                        for kind in ("enrolment", "key", "token", "grant")
                    },
                    endpoint_id=MISSING["webhook"](),
                ),
                headers=agent.headers,
            )
            assert response.status_code in (404, 405), (method, path, response.text)
            if not response.headers["content-type"].startswith(PROBLEM_JSON):
                wrong.append(f"{method} {path}: {response.status_code} {response.text}")
    assert not wrong, "answers that are not problem+json:\n" + "\n".join(wrong)


# --- part 4: the race the database decides (PostgreSQL) --------------------------------------


def together(
    runtime, count: int, request: Callable[[httpx.Client], httpx.Response]
) -> list[httpx.Response]:
    """``count`` in-process clients of one app, each sending ``request`` at the same moment."""
    app = create_app(runtime, publisher=lambda task, args: None)
    barrier = threading.Barrier(count)
    answers: list[httpx.Response | BaseException | None] = [None] * count

    def run(index: int) -> None:
        with in_process(app) as api:
            api.get("/healthz")  # the app and the client are warm before the race starts
            barrier.wait()
            try:
                answers[index] = request(api)
            except BaseException as exc:  # asserted on below, with the others
                answers[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    responses = [a for a in answers if isinstance(a, httpx.Response)]
    assert len(responses) == count, answers
    return responses


@pytest.mark.postgres
@postgresql_only
def test_one_valid_approval_replayed_eight_times_at_once_counts_once(runtime, world):
    draft_id = world.propose(DEMO)["draft_id"]
    alice = world.tenants[DEMO].callers["approver"]
    body = signed_body(alice, world.draft_fields(draft_id))
    url = f"/v1/drafts/{draft_id}/approvals"
    before = world.state()

    responses = together(runtime, 8, lambda api: api.post(url, json=body, headers=alice.headers))

    answers = sorted((r.status_code, r.json().get("code")) for r in responses)
    assert answers[0] == (201, None), answers
    assert set(answers[1:]) <= refused_with("ALREADY_SIGNED", "DRAFT_NOT_OPEN")
    after = world.state()
    assert len(after.approvals - before.approvals) == 1
    assert after.drafts[draft_id][0] == "approved"
    types = sorted(e.type for e in world.events_since(before))
    assert types == sorted(["approval.approved", "draft.approved"] + ["approval.refused"] * 7)

    executed = together(
        runtime,
        8,
        lambda api: api.post(f"/v1/drafts/{draft_id}/execute", headers=alice.headers),
    )

    assert {r.status_code for r in executed} == {202}
    assert len({r.json()["execution_id"] for r in executed}) == 1
    final = world.state()
    assert len(final.executions - after.executions) == 1
    assert final.outbox - after.outbox == 1


# --- part 5: the console's door (a session cookie and CSRF, never a bearer token) -----------
#
# What each /console route is, for the checks below: a page (HTML; without a session it sends
# the browser to the sign-in form), the sign-in form itself, a JSON read, a JSON write (a
# session, its CSRF token and the console's own origin), the sign-in and sign-out forms, and
# the static files.
PAGE, FORM, READ, WRITE, SIGN_IN, SIGN_OUT, EXPORT, FORM_POST, STATIC = (
    "page",
    "form",
    "read",
    "write",
    "sign_in",
    "sign_out",
    "export",  # a form post answered with a file (the audit export)
    "form_post",  # a form post answered with a redirect (revoking a grant)
    "static",
)
CONSOLE_ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/console"): "root",  # a permanent redirect to /console/, whoever asks
    ("GET", "/console/"): PAGE,
    ("GET", "/console/sign-in"): FORM,
    ("POST", "/console/sign-in"): SIGN_IN,
    ("POST", "/console/sign-out"): SIGN_OUT,
    ("GET", "/console/inbox/rows"): PAGE,
    ("GET", "/console/drafts/{draft_id}"): PAGE,
    ("GET", "/console/keys"): PAGE,
    ("GET", "/console/audit"): PAGE,
    ("GET", "/console/audit/drafts/{draft_id}"): PAGE,
    ("POST", "/console/audit/export"): EXPORT,
    ("POST", "/console/drafts/{draft_id}/approvals"): WRITE,
    ("POST", "/console/drafts/{draft_id}/execute"): WRITE,
    ("POST", "/console/drafts/{draft_id}/narrow"): WRITE,
    ("POST", "/console/drafts/{draft_id}/views"): WRITE,
    ("GET", "/console/executions/{execution_id}"): READ,
    ("GET", "/console/events"): READ,
    ("GET", "/console/executions/{execution_id}/events"): READ,
    ("GET", "/console/credentials"): READ,
    ("POST", "/console/credentials/enrolments"): WRITE,
    ("POST", "/console/credentials/passkeys/options"): WRITE,
    ("POST", "/console/credentials/passkeys"): WRITE,
    ("POST", "/console/approvals/batch/statement"): WRITE,
    ("POST", "/console/approvals/batch"): WRITE,
    ("GET", "/console/grants"): PAGE,
    ("GET", "/console/oversight"): PAGE,
    ("POST", "/console/grants/statement"): WRITE,
    ("POST", "/console/grants"): WRITE,
    ("POST", "/console/grants/{grant_id}/revoke"): FORM_POST,
    ("MOUNT", "/console/static"): STATIC,
}
CONSOLE_ORIGIN = "http://127.0.0.1:8000"  # plain http to loopback: the cookie is not Secure-only
SESSION_COOKIE = "dg_session"  # not the sign-in form's own dg_sign_in (no session exists yet)
STATIC_DIR = Path(console_package.__file__).parent / "static"


def test_the_console_section_covers_every_console_route(runtime):
    app = create_app(runtime, publisher=lambda task, args: None)
    console = {op for op in _all_operations(app) if _console(op[1])}
    assert console == set(CONSOLE_ROUTES), (
        f"console routes without a kind here: {sorted(console - set(CONSOLE_ROUTES))}, "
        f"kinds of routes no longer served: {sorted(set(CONSOLE_ROUTES) - console)}"
    )
    documented = {path for path in app.openapi()["paths"] if _console(path)}
    assert not documented, f"the console is not part of the API's document: {documented}"


@contextmanager
def console_client(runtime) -> Iterator[httpx.Client]:
    """A browser of the console: keeps cookies, at a loopback http origin."""
    app = create_app(runtime, publisher=lambda task, args: None)
    with (
        start_blocking_portal("asyncio") as portal,
        httpx.Client(
            transport=_PortalTransport(app, portal),
            base_url=CONSOLE_ORIGIN,
            timeout=60,
            follow_redirects=False,
        ) as client,
    ):
        yield client


def _console_sign_in(client: httpx.Client, caller: Caller) -> str:
    """Sign in through the form as a browser does; the session's CSRF token."""
    form = client.get("/console/sign-in")
    assert form.status_code == 200, form.text[:300]
    [csrf] = re.findall(r'name="csrf_token" value="([^"]*)"', form.text) or [""]
    fields = {"csrf_token": csrf} if csrf else {}
    signed = client.post(
        "/console/sign-in",
        data={**fields, "token": caller.token},
        headers={"Origin": CONSOLE_ORIGIN},
    )
    assert signed.status_code == 303, signed.text[:300]
    inbox = client.get("/console/")
    assert inbox.status_code == 200, inbox.text[:300]
    [token] = re.findall(r'<meta name="csrf-token" content="([^"]+)">', inbox.text)
    return token


def _console_url(path: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        path = path.replace("{" + name + "}", value)
    return path


def _console_body(world: World, path: str, draft_id: str) -> Any:
    if path.endswith("/approvals"):
        alice = world.tenants[DEMO].callers["approver"]
        return signed_body(alice, world.draft_fields(draft_id))
    if path.endswith("/enrolments"):
        return {"public_key": public_key_b64(generate_private_key())}
    if path.endswith("/batch/statement"):
        return {"draft_ids": [draft_id]}
    if path.endswith("/approvals/batch"):
        return batch_body(world, world.tenants[DEMO].callers["approver"], draft_id)
    if path.endswith("/grants/statement"):
        return {**GRANT_TERMS, "duration_seconds": 3_600}
    if path.endswith("/grants"):
        return grant_body(world.tenants[DEMO].callers["approver"])
    return {}


def test_the_console_refuses_every_request_without_a_session_and_ignores_bearer_tokens(
    runtime, world
):
    """No cookie: pages send the browser to the sign-in form; every JSON read and write and
    the sign-out are refused with a problem (never a 5xx); a bearer token of any role, sent
    with the same request, changes nothing of that answer, and nothing is recorded."""
    reads = reads_of(world, DEMO)
    ids = {
        "draft_id": world.propose(DEMO)["draft_id"],
        "execution_id": reads.execution_id,
        "grant_id": world.grant(DEMO),
    }
    bearers = [None] + [world.caller(role, DEMO) for role in ("agent", "approver", "auditor")]
    bearers.append(world.caller("admin", DEMO))
    problems: list[str] = []
    with console_client(runtime) as client:
        for (method, path), kind in sorted(CONSOLE_ROUTES.items()):
            url = "/console/static/js/card.js" if kind == STATIC else _console_url(path, ids)
            answers = set()
            for caller in bearers:
                headers = {"Origin": CONSOLE_ORIGIN, **(caller.headers if caller else {})}
                before = world.state()
                if method == "POST" and kind in (SIGN_IN, SIGN_OUT, EXPORT, FORM_POST):
                    response = client.post(url, data={}, headers=headers)
                else:
                    body = _console_body(world, path, ids["draft_id"]) if kind == WRITE else None
                    response = client.request(
                        method if method != "MOUNT" else "GET", url, json=body, headers=headers
                    )
                assert SESSION_COOKIE not in client.cookies, f"{method} {url} opened a session"
                after, events = world.state(), world.events_since(before)
                label = f"{method} {url} with {caller.role if caller else 'no'} token"
                if response.status_code >= 500:
                    problems.append(f"{label}: {response.status_code} {response.text[:200]}")
                    continue
                if after.effects != before.effects:
                    problems.append(f"{label}: changed {_diff(before, after)}")
                if kind in (PAGE,):
                    location = response.headers.get("location", "")
                    if response.status_code != 303 or not location.startswith("/console/sign-in"):
                        problems.append(f"{label}: {response.status_code} {location!r}")
                elif kind in (FORM, STATIC):
                    if response.status_code != 200:
                        problems.append(f"{label}: {response.status_code}")
                elif kind == "root":
                    location = response.headers.get("location", "")
                    if (response.status_code, location) != (308, "/console/"):
                        problems.append(f"{label}: {response.status_code} {location!r}")
                elif kind in (SIGN_OUT, EXPORT, FORM_POST):  # a form: refused with an error page
                    if response.status_code not in (401, 403):
                        problems.append(f"{label}: {response.status_code} {response.text[:200]}")
                elif kind == SIGN_IN:  # no token in the form: refused, nobody signed in
                    if response.status_code not in (400, 401, 403, 422):
                        problems.append(f"{label}: {response.status_code} {response.text[:200]}")
                elif not (
                    response.status_code in (401, 403)
                    and response.headers["content-type"].startswith(PROBLEM_JSON)
                ):
                    problems.append(f"{label}: {response.status_code} {response.text[:200]}")
                refusals = [e.type for e in events if e.type != "auth.refused"]
                if refusals:
                    problems.append(f"{label}: audited {refusals} for a request with no session")
                code = (
                    response.json().get("code")
                    if PROBLEM_JSON in response.headers.get("content-type", "")
                    else None
                )
                answers.add((response.status_code, code, response.headers.get("location")))
            if len(answers) != 1:
                problems.append(f"{method} {url}: a bearer token changes the answer: {answers}")
    assert not problems, "\n".join(problems)


def test_a_console_session_sees_and_acts_on_its_own_tenant_only(runtime, world):
    """An approver of acme, signed in to the console: demo's drafts, executions and keys are
    not in its pages or reads, and asking for a demo draft or execution (or deciding one)
    answers exactly what a made-up id answers, and changes nothing."""
    demo_reads, acme_reads = reads_of(world, DEMO), reads_of(world, ACME)
    demo_open = world.propose(DEMO)["draft_id"]
    acme_alice = world.tenants[ACME].callers["approver"]
    demo_alice = world.tenants[DEMO].callers["approver"]
    with console_client(runtime) as client:
        csrf = _console_sign_in(client, acme_alice)
        inbox = client.get("/console/").text + client.get("/console/inbox/rows").text
        assert acme_reads.draft_id in inbox, "the acme approver's own queue is shown"
        leaked = [i for i in (demo_reads.draft_id, demo_open) if i in inbox]
        assert not leaked, f"demo drafts in acme's inbox: {leaked}"

        credentials = client.get("/console/credentials")
        assert credentials.status_code == 200, credentials.text
        shown = {key["key_id"] for key in credentials.json()["keys"]}
        assert shown == {acme_alice.key_id}, f"{shown} (demo's alice holds {demo_alice.key_id})"
        keys_page = client.get("/console/keys").text
        assert demo_alice.key_id not in keys_page  # its keys are listed by its script

        def same_as_missing(
            method: str,
            path: str,
            real: str,
            made_up: str,
            sign: Callable[[str], Any] = lambda i: None,
        ) -> None:
            """``sign(id)``: the body for that id (a stolen approval names its draft)."""
            before = world.state()
            headers = {"Origin": CONSOLE_ORIGIN, "X-CSRF-Token": csrf}
            answers = [
                client.request(
                    method,
                    path.replace("{id}", i),
                    json=None if method == "GET" else sign(i),
                    headers=headers,
                )
                for i in (real, made_up)
            ]
            assert world.state().effects == before.effects, f"{method} {path} changed something"
            statuses = [a.status_code for a in answers]
            assert statuses[0] == statuses[1], (path, statuses)
            # refused (which check refuses first is the /v1 twin's; here: that it is refused)
            assert 400 <= statuses[0] < 500, (path, statuses)
            if answers[0].headers["content-type"].startswith(PROBLEM_JSON):
                assert _problem_without_instance(
                    answers[0], real, made_up
                ) == _problem_without_instance(answers[1]), [a.text for a in answers]
            else:  # a page: the same page but the id
                assert answers[0].text.replace(real, made_up) == answers[1].text

        same_as_missing("GET", "/console/drafts/{id}", demo_open, missing_draft_id())
        execution = missing_execution_id()
        same_as_missing("GET", "/console/executions/{id}", demo_reads.execution_id, execution)
        fields = world.draft_fields(demo_open)
        stolen = lambda i: signed_body(demo_alice, {**fields, "draft_id": i})  # noqa: E731
        same_as_missing(
            "POST", "/console/drafts/{id}/approvals", demo_open, missing_draft_id(), stolen
        )
        executable = world.approved_draft(DEMO)
        same_as_missing(
            "POST", "/console/drafts/{id}/execute", executable, missing_draft_id(), lambda i: None
        )
    assert world.draft_status(demo_open) == "proposed"


def test_a_console_write_without_its_csrf_token_or_from_another_origin_is_refused(runtime, world):
    """A signed-in approver's own session, replayed by another page: without the CSRF header,
    with another session's CSRF token, or from another origin, every JSON write is refused
    with a problem, audited once, and changes nothing."""
    demo_alice = world.tenants[DEMO].callers["approver"]
    problems: list[str] = []
    with console_client(runtime) as other:
        other_csrf = _console_sign_in(other, world.tenants[DEMO].callers["bob"])
    with console_client(runtime) as client:
        csrf = _console_sign_in(client, demo_alice)
        assert csrf != other_csrf
        for (method, path), kind in sorted(CONSOLE_ROUTES.items()):
            if kind != WRITE:
                continue
            draft_id = world.propose(DEMO)["draft_id"]
            url = _console_url(path, {"draft_id": draft_id})
            for why, headers in {
                "no CSRF token": {"Origin": CONSOLE_ORIGIN},
                "another session's CSRF token": {
                    "Origin": CONSOLE_ORIGIN,
                    "X-CSRF-Token": other_csrf,
                },
                "another origin": {"Origin": "https://evil.example", "X-CSRF-Token": csrf},
                "a cross-site fetch": {"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": csrf},
            }.items():
                before = world.state()
                body = _console_body(world, path, draft_id)
                response = client.request(method, url, json=body, headers=headers)
                after, events = world.state(), world.events_since(before)
                label = f"{method} {path} with {why}"
                if response.status_code != 403 or not response.headers["content-type"].startswith(
                    PROBLEM_JSON
                ):
                    problems.append(f"{label}: {response.status_code} {response.text[:200]}")
                if after.effects != before.effects:
                    problems.append(f"{label}: changed {_diff(before, after)}")
                if len([e for e in events if e.type.endswith(".refused")]) != 1:
                    problems.append(f"{label}: audited {[e.type for e in events]}")
    assert not problems, "\n".join(problems)


def _raw_get(app: Any, raw_path: bytes) -> tuple[int, bytes]:
    """GET a path exactly as spelled (an HTTP client would resolve its dot segments)."""
    answer: dict[str, Any] = {"status": 0, "body": b""}

    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if received:  # the client stays connected until the answer is complete
            await anyio.sleep_forever()
        received = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(raw_path.decode()),
        "raw_path": raw_path,
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1:8000")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    anyio.run(app, scope, receive, send)
    return answer["status"], answer["body"]


def test_the_console_static_mount_serves_its_files_and_nothing_outside_them(runtime):
    app = create_app(runtime, publisher=lambda task, args: None)
    files = sorted(p for p in STATIC_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert files, STATIC_DIR
    for file in files:
        status, body = _raw_get(app, f"/console/static/{file.relative_to(STATIC_DIR)}".encode())
        assert (status, body) == (200, file.read_bytes()), file
    outside = {
        STATIC_DIR.parent / "templates" / "base.html": b"csrf-token",
        STATIC_DIR.parent / "guard.py": b"def own_origin",
        Path(console_package.__file__).parents[3] / "pyproject.toml": b"[project]",
    }
    probes = [
        b"/console/static/../templates/base.html",
        b"/console/static/%2e%2e/templates/base.html",
        b"/console/static/..%2ftemplates%2fbase.html",
        b"/console/static/js/../../guard.py",
        b"/console/static/%2e%2e/guard.py",
        b"/console/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/pyproject.toml",
        b"/console/static/..%5c..%5cguard.py",
        b"/console/static//etc/passwd",
        b"/console/static/" + str(STATIC_DIR.parent / "guard.py").encode(),
        b"/console/static/js/card.js%00.html",
    ]
    for probe in probes:
        status, body = _raw_get(app, probe)
        assert 400 <= status < 500, (probe, status, body[:200])
        for file, marker in outside.items():
            assert marker not in body, f"{probe!r} served {file}"
        assert b"root:" not in body, probe
