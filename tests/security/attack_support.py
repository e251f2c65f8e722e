"""Two tenants with a caller of every kind, fresh targets on demand, and what the database
holds before and after a request: the ground the attack matrix (test_attack_matrix.py) stands
on.

The demo tenant is the one seeded by the ``demo`` fixture (alice, bob, audrey, root, the
support agent); "acme" is a second tenant with its own shop, agent, auditor, admin and an
approver who is also called ``alice``, with a key of her own: a foreign caller whose subject
collides with a local one. Every tenant also holds a revoked approver and a revoked auditor
token.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import and_, func, or_, select, update
from sqlmodel import Session, col

from harness.databases import sqlite_copy
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.approvals import actions as approvals
from service.approvals.models import Approval
from service.approvals.schemas import (
    BATCH_STATEMENT_TYPE,
    ApprovalRequest,
    Decision,
    build_statement,
    signed_request,
)
from service.audit.models import AuditEvent
from service.canonical import canonical_json
from service.config import DEMO_POLICIES, Settings
from service.db import session_scope
from service.demo import seed_demo
from service.drafts.models import Draft
from service.executions import actions as executions
from service.executions.models import Execution, OutboxMessage
from service.grants import actions as grants
from service.grants.models import Grant, GrantUse
from service.grants.schemas import GRANT_STATEMENT_TYPE, GrantRequest
from service.keys import actions as keys
from service.keys import enrolments, passkeys
from service.keys.assertions import relying_party
from service.keys.models import (
    ApproverKey,
    ApproverPasskey,
    KeyEnrolment,
    WebAuthnChallenge,
)
from service.keys.schemas import KeyEnrolmentRequest, PasskeyRegistrationRequest
from service.principal import Role
from service.runtime import Runtime, build_runtime
from service.shop.seed import seed_shop
from service.signing import (
    b64url,
    b64url_decode,
    generate_private_key,
    key_id_for,
    load_private_key,
    public_key_b64,
    sign,
    write_private_key,
)
from service.sql import rfc3339_seconds, utcnow
from service.tokens import actions as tokens
from service.tokens.models import ApiToken
from service.tracing import new_trace_id
from service.validation import parse
from service.webhooks import actions as webhooks
from service.webhooks.models import WebhookDelivery, WebhookEndpoint
from tests.support.api_client import bearer, in_process
from tests.support.authenticator import SoftwareAuthenticator

DEMO, ACME = "demo", "acme"
TENANTS = (DEMO, ACME)
OPERATOR = "operator:attack-matrix"
PROBLEM_JSON = "application/problem+json"
# Thousands of requests, each refusal audited one by one: no limit may aggregate or refuse
# them. The demo's policies: approvers may grant refunds (the grant routes answer).
NO_RATE_LIMITS: dict[str, Any] = {
    "rate_limit_per_address": "",
    "rate_limit_per_token": "",
    "rate_limit_recorded_refusals": "1000000/minute",
    "policies": DEMO_POLICIES,
}
# A grant of the matrix covers only drafts of an agent that proposes nothing, so the drafts
# the matrix proposes to be approved stay open whatever grants its cells create.
GRANT_TERMS: dict[str, Any] = {
    "action": "refund",
    "currency": "USD",
    "max_amount_minor": 2_000,
    "agent": "no-such-agent",
}
SMALL_ORDER = "ORD-1004"  # 785.00 USD: refunds up to 500.00 need one approver
# A public address literal: creating an endpoint resolves nothing and needs no private-address
# opt-in; nothing is ever delivered here (no worker runs in these tests).
WEBHOOK_URL = "https://93.184.215.14/draftgate-hook"
# What the credential and webhook routes change; a column that every authenticated request
# may bump (a passkey's last use) is not a change a refusal could make.
CREDENTIAL_TABLES = (
    ApproverKey,
    ApproverPasskey,
    KeyEnrolment,
    WebAuthnChallenge,
    ApiToken,
    WebhookEndpoint,
    WebhookDelivery,
    Grant,
    GrantUse,
)
VOLATILE_COLUMNS = frozenset({"last_used_at"})
# KWD has no tier of its own in the reference policy, so it gets the strictest: two approvers.
TWO_APPROVER_ORDER = "ORD-1007"


def missing_draft_id() -> str:
    return "dft_" + secrets.token_hex(16)


def missing_execution_id() -> str:
    return "exe_" + secrets.token_hex(12)


@dataclass(frozen=True)
class Caller:
    """Whoever sends a request: a role, the tenant of its token, and what it signs with."""

    role: str  # none | unknown | revoked | agent | approver | auditor | admin
    tenant: str | None
    token: str | None
    subject: str | None = None
    key_file: Path | None = None
    token_role: str | None = None  # the role a revoked token had

    @property
    def actor(self) -> str:
        return f"{self.token_role or self.role}:{self.subject}"

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token) if self.token else {}

    @cached_property
    def key_id(self) -> str:
        assert self.key_file is not None, f"{self.actor} has no key"
        return key_id_for(public_key_b64(load_private_key(self.key_file)))


@dataclass
class Tenant:
    name: str
    door: ToolDoor  # the tenant's agent, proposing for cust-ada
    callers: dict[str, Caller] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """What a request could change: drafts, approvals, executions, outbox, the audit heads."""

    drafts: dict[str, tuple[str, int]]
    approvals: frozenset[str]
    executions: frozenset[str]
    outbox: int
    heads: dict[str, int]
    credentials: frozenset[tuple[Any, ...]] = frozenset()  # keys, tokens, webhooks, rows

    @property
    def effects(self) -> tuple[Any, ...]:
        """Everything but the audit heads: what no refused request may change."""
        return self.drafts, self.approvals, self.executions, self.outbox, self.credentials


class World:
    """Both tenants, their callers, and helpers that create and inspect targets."""

    def __init__(self, runtime: Runtime, demo: dict[str, Any], key_dir: Path) -> None:
        self.runtime = runtime
        self.demo = demo
        self.key_dir = key_dir
        self._amounts = itertools.count(101)
        self.tenants = {DEMO: self._demo_tenant(demo), ACME: self._acme_tenant()}

    # --- callers ------------------------------------------------------------------------

    def caller(self, role: str, tenant: str, *, revoked_role: str = "approver") -> Caller:
        if role == "none":
            return Caller("none", None, None)
        if role == "unknown":
            return Caller("unknown", None, "dg_" + secrets.token_urlsafe(32))
        if role == "revoked":
            return self.tenants[tenant].callers[f"revoked_{revoked_role}"]
        return self.tenants[tenant].callers[role]

    def _demo_tenant(self, demo: dict[str, Any]) -> Tenant:
        issued = demo["tokens"]
        files = {name: Path(a["private_key_file"]) for name, a in demo["approvers"].items()}
        tenant = Tenant(DEMO, ToolDoor(self.runtime, stdio_token=issued["agent"]))
        tenant.callers = {
            "agent": Caller("agent", DEMO, issued["agent"], "support-agent"),
            "approver": Caller("approver", DEMO, issued["approver_alice"], "alice", files["alice"]),
            "bob": Caller("approver", DEMO, issued["approver_bob"], "bob", files["bob"]),
            "auditor": Caller("auditor", DEMO, issued["auditor"], "audrey"),
            "admin": Caller("admin", DEMO, issued["admin"], "root"),
        }
        tenant.callers |= self._revoked(DEMO)
        return tenant

    def _acme_tenant(self) -> Tenant:
        with session_scope(self.runtime.engine) as session:
            seed_shop(session, ACME, now=utcnow())
        agent = self.issue(ACME, "acme-bot", Role.AGENT, on_behalf_of="cust-ada")
        tenant = Tenant(ACME, ToolDoor(self.runtime, stdio_token=agent.token))
        tenant.callers = {
            "agent": agent,
            "approver": self.approver(ACME, "alice"),  # the same subject as demo's alice
            "bob": self.approver(ACME, "bob"),
            "auditor": self.issue(ACME, "acme-auditor", Role.AUDITOR),
            "admin": self.issue(ACME, "acme-root", Role.ADMIN),
        }
        tenant.callers |= self._revoked(ACME)
        return tenant

    def _revoked(self, tenant: str) -> dict[str, Caller]:
        revoked = {}
        for role in (Role.APPROVER, Role.AUDITOR, Role.ADMIN):
            issued = self.issue(tenant, f"revoked-{role.value}", role)
            with session_scope(self.runtime.engine) as session:
                token_id = tokens.authenticate(session, issued.token).token_id
                tokens.revoke(session, tenant=tenant, token_id=token_id, actor=OPERATOR)
            revoked[f"revoked_{role.value}"] = Caller(
                "revoked", tenant, issued.token, issued.subject, token_role=role.value
            )
        return revoked

    def issue(
        self, tenant: str, subject: str, role: Role, *, on_behalf_of: str | None = None
    ) -> Caller:
        with session_scope(self.runtime.engine) as session:
            token = tokens.issue(
                session,
                tenant=tenant,
                subject=subject,
                role=role,
                on_behalf_of=on_behalf_of,
                actor=OPERATOR,
            ).token
        return Caller(role.value, tenant, token, subject)

    def approver(self, tenant: str, subject: str) -> Caller:
        """A new approver token and a freshly registered key of ``subject`` in ``tenant``."""
        key_file = self.new_key_file(f"{tenant}-{subject}")
        with session_scope(self.runtime.engine) as session:
            keys.register(
                session,
                tenant=tenant,
                approver=subject,
                public_key=public_key_b64(load_private_key(key_file)),
                actor=OPERATOR,
            )
        issued = self.issue(tenant, subject, Role.APPROVER)
        return Caller("approver", tenant, issued.token, subject, key_file)

    def new_key_file(self, name: str) -> Path:
        path = self.key_dir / f"{name}-{secrets.token_hex(4)}.pem"
        write_private_key(generate_private_key(), path)
        return path

    def principal(self, caller: Caller) -> Any:
        with Session(self.runtime.engine) as session:
            return tokens.authenticate(session, caller.token)

    def enrolment(self, tenant: str) -> str:
        """A pending Ed25519 key enrolment of the tenant's approver."""
        approver = self.tenants[tenant].callers["approver"]
        public_key = public_key_b64(generate_private_key())
        with session_scope(self.runtime.engine) as session:
            principal = tokens.authenticate(session, approver.token)
            request = parse(KeyEnrolmentRequest, {"public_key": public_key})
            found = enrolments.enrol_key(session, principal, request=request, now=utcnow())
        return found.enrolment_id

    def registered_key(self, tenant: str) -> str:
        """A fresh active key of the tenant's approver bob (registered by the operator)."""
        public_key = public_key_b64(generate_private_key())
        with session_scope(self.runtime.engine) as session:
            keys.register(
                session, tenant=tenant, approver="bob", public_key=public_key, actor=OPERATOR
            )
        return key_id_for(public_key)

    def passkey(self, tenant: str) -> str:
        """A fresh active passkey of the tenant's approver (enrolled, approved by the admin)."""
        callers = self.tenants[tenant].callers
        party = relying_party(self.runtime.settings)
        authenticator = SoftwareAuthenticator(rp_id=party.rp_id, origin=party.origins[0])
        settings = self.runtime.settings
        with session_scope(self.runtime.engine) as session:
            approver = tokens.authenticate(session, callers["approver"].token)
            options = passkeys.registration_options(
                session, approver, settings=settings, now=utcnow()
            )
            request = parse(
                PasskeyRegistrationRequest, {"credential": authenticator.create(options.options)}
            )
            enrolled = enrolments.enrol_passkey(
                session, approver, settings=settings, request=request, now=utcnow()
            )
            admin = tokens.authenticate(session, callers["admin"].token)
            enrolments.approve(session, admin, enrolment_id=enrolled.enrolment_id, now=utcnow())
        return enrolled.key_id

    def passkey_credential(self, tenant: str) -> dict[str, Any]:
        """A passkey created for a fresh registration challenge of the tenant's approver."""
        party = relying_party(self.runtime.settings)
        authenticator = SoftwareAuthenticator(rp_id=party.rp_id, origin=party.origins[0])
        with session_scope(self.runtime.engine) as session:
            approver = tokens.authenticate(session, self.tenants[tenant].callers["approver"].token)
            options = passkeys.registration_options(
                session, approver, settings=self.runtime.settings, now=utcnow()
            )
        return authenticator.create(options.options)

    def token(self, tenant: str) -> str:
        """The id of a fresh auditor token of the tenant."""
        caller = self.issue(tenant, f"auditor-{secrets.token_hex(3)}", Role.AUDITOR)
        return str(self.principal(caller).token_id)

    def grant(self, tenant: str) -> str:
        """A fresh standing grant of the tenant's approver, recorded through the core."""
        approver = self.tenants[tenant].callers["approver"]
        with session_scope(self.runtime.engine) as session:
            principal = tokens.authenticate(session, approver.token)
            request = parse(GrantRequest, grant_body(approver))
            created = grants.create(session, principal, request, runtime=self.runtime, now=utcnow())
        return created.grant_id

    def webhook(self, tenant: str) -> str:
        """A fresh endpoint of the tenant, added by its admin through the core."""
        admin = self.tenants[tenant].callers["admin"]
        with session_scope(self.runtime.engine) as session:
            principal = tokens.authenticate(session, admin.token)
            created = webhooks.create(
                session,
                principal,
                runtime=self.runtime,
                body={"url": WEBHOOK_URL, "events": ["draft.approved"]},
                now=utcnow(),
            )
        return created.endpoint_id

    def revoke_key(self, caller: Caller) -> None:
        assert caller.tenant is not None
        with session_scope(self.runtime.engine) as session:
            keys.revoke(session, tenant=caller.tenant, key_id=caller.key_id, actor=OPERATOR)

    # --- targets ------------------------------------------------------------------------

    def propose(
        self,
        tenant: str = DEMO,
        *,
        order: str = SMALL_ORDER,
        trace_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A new refund draft (a fresh amount each time, so it is never deduplicated)."""
        currency = "KWD" if order == TWO_APPROVER_ORDER else "USD"
        arguments = {
            "order_id": order,
            "amount": {"amount_minor": next(self._amounts), "currency": currency},
            "reason": "damaged",
            **extra,
        }
        door = self.tenants[tenant].door
        result: dict[str, Any] = door.call(
            "propose_refund", arguments, trace_id or new_trace_id(), None
        )
        return result

    def revise(self, tenant: str, draft_id: str, *, order: str = SMALL_ORDER) -> dict[str, Any]:
        return self.propose(tenant, order=order, draft_id=draft_id)

    def draft_fields(self, draft_id: str) -> dict[str, Any]:
        """What a statement is built from, read from the database (not through the API)."""
        with Session(self.runtime.engine) as session:
            draft = session.get(Draft, draft_id)
            assert draft is not None
            return {
                "tenant": draft.tenant,
                "draft_id": draft.id,
                "revision": draft.revision,
                "action": draft.action,
                "contract_version": draft.contract_version,
                "params_sha256": draft.params_sha256,
                "source_revision": draft.source_revision,
            }

    def draft_params(self, draft_id: str) -> dict[str, Any]:
        with Session(self.runtime.engine) as session:
            draft = session.get(Draft, draft_id)
            assert draft is not None
            return dict(draft.params)

    def approve_in_core(self, tenant: str, draft_id: str, approver: str = "approver") -> None:
        caller = self.tenants[tenant].callers[approver]
        body = signed_body(caller, self.draft_fields(draft_id))
        with session_scope(self.runtime.engine) as session:
            principal = tokens.authenticate(session, caller.token)
            approvals.submit(
                session,
                principal,
                runtime=self.runtime,
                draft_id=draft_id,
                request=parse(ApprovalRequest, body),
                now=utcnow(),
            )

    def approved_draft(self, tenant: str = DEMO) -> str:
        draft_id = str(self.propose(tenant)["draft_id"])
        self.approve_in_core(tenant, draft_id)
        assert self.draft_status(draft_id) == "approved"
        return draft_id

    def execution_of(self, tenant: str, draft_id: str) -> str:
        """Request the approved draft's execution through the core (nothing is published)."""
        caller = self.tenants[tenant].callers["approver"]
        with session_scope(self.runtime.engine) as session:
            principal = tokens.authenticate(session, caller.token)
            execution, created = executions.request(
                session, principal, runtime=self.runtime, draft_id=draft_id, now=utcnow()
            )
        assert created
        return execution.id

    def expire(self, draft_id: str) -> None:
        with session_scope(self.runtime.engine) as session:
            session.execute(
                update(Draft)
                .where(col(Draft.id) == draft_id)
                .values(expires_at=utcnow() - timedelta(minutes=1))
            )

    # --- what the database holds --------------------------------------------------------

    def draft_status(self, draft_id: str) -> str:
        with Session(self.runtime.engine) as session:
            draft = session.get(Draft, draft_id)
            assert draft is not None
            return str(draft.status)

    def tenant_of_drafts(self, draft_ids: list[str]) -> set[str]:
        with Session(self.runtime.engine) as session:
            rows = session.execute(select(Draft.tenant).where(col(Draft.id).in_(draft_ids)))
            return {str(tenant) for (tenant,) in rows}

    def state(self) -> State:
        drafts, approval, execution, outbox, audit = (
            model.__table__  # type: ignore[attr-defined]
            for model in (Draft, Approval, Execution, OutboxMessage, AuditEvent)
        )
        with self.runtime.engine.connect() as connection:
            rows = connection.execute(select(drafts.c.id, drafts.c.status, drafts.c.revision))
            heads = connection.execute(
                select(audit.c.tenant, func.max(audit.c.seq)).group_by(audit.c.tenant)
            )
            return State(
                drafts={str(i): (str(s), int(r)) for i, s, r in rows},
                approvals=frozenset(connection.scalars(select(approval.c.id)).all()),
                executions=frozenset(connection.scalars(select(execution.c.id)).all()),
                outbox=int(connection.scalar(select(func.count()).select_from(outbox)) or 0),
                heads={str(t): int(seq) for t, seq in heads},
                credentials=frozenset(_rows(connection)),
            )

    def events_since(self, before: State) -> list[AuditEvent]:
        """Every audit event appended, in any tenant's chain, since ``before`` was taken."""
        newer = [
            and_(col(AuditEvent.tenant) == tenant, col(AuditEvent.seq) > seq)
            for tenant, seq in before.heads.items()
        ]
        elsewhere = col(AuditEvent.tenant).not_in(list(before.heads))
        with Session(self.runtime.engine) as session:
            statement = (
                select(AuditEvent)
                .where(or_(elsewhere, *newer))
                .order_by(col(AuditEvent.tenant), col(AuditEvent.seq))
            )
            return list(session.scalars(statement).all())


def _rows(connection: Any) -> Iterator[tuple[Any, ...]]:
    for model in CREDENTIAL_TABLES:
        table = model.__table__  # type: ignore[union-attr]
        columns = [c for c in table.c if c.name not in VOLATILE_COLUMNS]
        for row in connection.execute(select(*columns)):
            yield (table.name, *map(str, row))


def signed_body(
    caller: Caller,
    fields: dict[str, Any],
    *,
    decision: Decision = Decision.APPROVE,
    reason: str | None = None,
    issued_at: datetime | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A request body: the statement ``caller`` signs over ``fields`` (JCS, their own key)."""
    assert caller.key_file is not None, caller
    assert caller.subject is not None, caller
    statement = build_statement(
        **fields,
        decision=decision,
        approver=caller.subject,
        key_id=caller.key_id,
        issued_at=rfc3339_seconds(issued_at or utcnow()),
        reason=reason,
    )
    statement.update(overrides)
    return signed_request(statement, load_private_key(caller.key_file))


def batch_body(world: World, caller: Caller, *draft_ids: str) -> dict[str, Any]:
    """A batch statement ``caller`` signs over the drafts as they stand (their totals added
    up from the stored amounts, which the proposals just wrote)."""
    assert caller.key_file is not None, caller
    items, totals = [], {}
    for draft_id in draft_ids:
        fields = world.draft_fields(draft_id)
        item = {k: fields[k] for k in ("revision", "action", "contract_version", "params_sha256")}
        if fields.get("source_revision"):
            item["source_revision"] = fields["source_revision"]
        items.append({"draft_id": draft_id, **item})
        with Session(world.runtime.engine) as session:
            draft = session.get(Draft, draft_id)
            assert draft is not None
            assert draft.currency is not None
            totals[draft.currency] = totals.get(draft.currency, 0) + (draft.amount_minor or 0)
    statement = {
        "type": BATCH_STATEMENT_TYPE,
        "tenant": caller.tenant,
        "approver": caller.subject,
        "key_id": caller.key_id,
        "issued_at": rfc3339_seconds(utcnow()),
        "items": items,
        "totals": [{"currency": c, "amount_minor": m} for c, m in sorted(totals.items())],
    }
    return signed_request(statement, load_private_key(caller.key_file))


def grant_body(caller: Caller) -> dict[str, Any]:
    """A grant statement ``caller`` signs in their own name and tenant, never the same twice
    (its id names it), and its signature."""
    assert caller.key_file is not None, caller
    now = utcnow()
    statement = {
        **GRANT_TERMS,
        "type": GRANT_STATEMENT_TYPE,
        "tenant": caller.tenant,
        "approver": caller.subject,
        "key_id": caller.key_id,
        "max_uses": secrets.randbelow(10_000) + 1,
        "not_before": rfc3339_seconds(now),
        "expires_at": rfc3339_seconds(now + timedelta(hours=1)),
        "issued_at": rfc3339_seconds(now),
    }
    return signed_request(statement, load_private_key(caller.key_file))


@contextmanager
def api_client(runtime: Runtime) -> Iterator[httpx.Client]:
    """The real app in-process; execution tasks are not published (no worker runs here)."""
    with in_process(create_app(runtime, publisher=lambda task, args: None)) as client:
        yield client


@contextmanager
def module_world(template: Path, root: Path) -> Iterator[World]:
    """A world of its own on a copy of the migrated SQLite template, for a whole module."""
    settings = Settings(
        state_dir=root / "state",
        database_url=sqlite_copy(template, root / "draftgate.db"),
        **NO_RATE_LIMITS,
    )
    runtime = build_runtime(settings)
    try:
        with session_scope(runtime.engine) as session:
            demo = seed_demo(
                session,
                tenant=DEMO,
                state_dir=settings.state_dir,
                api_url="http://api.invalid",
                mcp_url="http://mcp.invalid/mcp",
            )
        yield World(runtime, demo, root / "keys")
    finally:
        runtime.engine.dispose()


# --- forged and replayed approvals -----------------------------------------------------------

# The status of each refusal code (docs/errors.md: a code's category decides its status).
STATUS = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "APPROVER_MISMATCH": 403,
    "KEY_NOT_OWNED": 403,
    "KEY_REVOKED": 403,
    "SELF_APPROVAL": 403,
    "SIGNATURE_INVALID": 403,
    "DRAFT_UNAVAILABLE": 404,
    "ALREADY_SIGNED": 409,
    "DRAFT_EXPIRED": 409,
    "DRAFT_NOT_OPEN": 409,
    "STALE_REVISION": 409,
    "STATEMENT_MISMATCH": 409,
    "STATEMENT_STALE": 409,
}
# Ed25519's group order: S + L is the textbook malleated twin of a signature (RFC 8032
# §5.1.7 requires S < L).
ED25519_L = 2**252 + 27742317777372353535851937790883648493
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def refused_with(*codes: str) -> frozenset[tuple[int, str]]:
    """The acceptable (status, code) answers; more than one only where a variant breaks several
    rules at once and the design does not say which check comes first."""
    return frozenset((STATUS[code], code) for code in codes)


def signed_by(key_file: Path, statement: dict[str, Any], *, message: bytes | None = None) -> Any:
    """A request body: ``statement`` with a signature by ``key_file`` over ``message``
    (by default what the server verifies: JCS(statement))."""
    signed = canonical_json(statement) if message is None else message
    return {"statement": statement, "signature": sign(load_private_key(key_file), signed)}


@dataclass
class Lab:
    """One world for a whole module; every variant brings its own drafts and approvers."""

    world: World
    api: httpx.Client

    @property
    def alice(self) -> Caller:
        return self.world.tenants[DEMO].callers["approver"]

    @property
    def bob(self) -> Caller:
        return self.world.tenants[DEMO].callers["bob"]

    @property
    def acme_alice(self) -> Caller:
        return self.world.tenants[ACME].callers["approver"]

    def draft(self, *, approvers: int = 1) -> str:
        """A new demo draft needing ``approvers`` approvals (read back from the database)."""
        order = TWO_APPROVER_ORDER if approvers == 2 else SMALL_ORDER
        draft_id = str(self.world.propose(DEMO, order=order)["draft_id"])
        with Session(self.world.runtime.engine) as session:
            draft = session.get(Draft, draft_id)
            assert draft is not None
            assert draft.approvals_required == approvers, draft.policy
        return draft_id

    def statement(self, signer: Caller, draft_id: str, **kwargs: Any) -> dict[str, Any]:
        statement: dict[str, Any] = self.body(signer, draft_id, **kwargs)["statement"]
        return statement

    def body(self, signer: Caller, draft_id: str, **kwargs: Any) -> dict[str, Any]:
        return signed_body(signer, self.world.draft_fields(draft_id), **kwargs)

    def post(self, caller: Caller, draft_id: str, body: Any) -> httpx.Response:
        return self.api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=caller.headers)

    def decide(self, signer: Caller, draft_id: str, **kwargs: Any) -> httpx.Response:
        return self.post(signer, draft_id, self.body(signer, draft_id, **kwargs))

    def accepted(self, signer: Caller, draft_id: str, **kwargs: Any) -> dict[str, Any]:
        """Sign and post a decision that must be accepted; returns the body that was sent."""
        body = self.body(signer, draft_id, **kwargs)
        response = self.post(signer, draft_id, body)
        assert response.status_code == 201, response.text
        return body


@dataclass
class Attempt:
    """One forged or replayed decision, and what the design says must come of it."""

    draft_id: str  # the draft in the URL
    caller: Caller  # whose token is presented
    refused: frozenset[tuple[int, str]]
    body: Any = None
    raw: bytes | None = None  # the exact request body, where its spelling is the attack
    event: str = "approval.refused"
    event_tenant: str = DEMO
    may_expire: bool = False  # refusing an expired draft may record its expiry
    execute_code: str = "NOT_APPROVED"
    # A legitimate decision the draft must still accept afterwards (None: the draft is closed).
    control: Callable[[], httpx.Response] | None = None

    def send(self, api: httpx.Client) -> httpx.Response:
        url = f"/v1/drafts/{self.draft_id}/approvals"
        if self.raw is None:
            return api.post(url, json=self.body, headers=self.caller.headers)
        headers = {**self.caller.headers, "Content-Type": "application/json"}
        return api.post(url, content=self.raw, headers=headers)


def flip_bit(signature: str, bit: int) -> str:
    raw = bytearray(b64url_decode(signature))
    raw[bit // 8] ^= 1 << (bit % 8)
    return b64url(bytes(raw))


def s_plus_l(signature: str) -> str:
    raw = b64url_decode(signature)
    s = int.from_bytes(raw[32:], "little") + ED25519_L
    return b64url(raw[:32] + s.to_bytes(32, "little"))


def padding_bits_set(signature: str) -> str:
    """The same 64 bytes spelled differently: 86 characters carry 516 bits, the last 4 unused."""
    return signature[:-1] + B64URL[B64URL.index(signature[-1]) | 0b1111]


def escaped_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace, and every character of every string \\u-escaped."""
    if isinstance(value, dict):
        items = (f"{escaped_json(k)}:{escaped_json(v)}" for k, v in sorted(value.items()))
        return "{" + ",".join(items) + "}"
    if isinstance(value, str):
        return '"' + "".join(f"\\u{ord(c):04x}" for c in value) + '"'
    return json.dumps(value)
