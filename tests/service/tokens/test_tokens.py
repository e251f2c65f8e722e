"""Bearer tokens: issued once, stored only as SHA-256, resolved to a principal (DESIGN.md §7)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import Session

from mcp_adapter.tools import ToolDoor
from service.audit.models import AuditEvent
from service.db import session_scope
from service.errors import Category, DomainError
from service.principal import Principal, Role
from service.tables import metadata
from service.tokens import actions as tokens
from service.tokens.models import ApiToken
from service.tracing import new_trace_id

ISSUER = "operator:test"
TOKEN_SHAPE = re.compile(r"^dg_[A-Za-z0-9_-]{43}$")  # dg_ + 256 bits, base64url


def issue(runtime, **fields: Any) -> tokens.IssuedToken:
    defaults: dict[str, Any] = {"tenant": "acme", "subject": "bot", "role": Role.AGENT}
    if fields.get("role", Role.AGENT) is Role.AGENT:
        defaults["on_behalf_of"] = "cust-ada"
    with session_scope(runtime.engine) as session:
        return tokens.issue(session, **{**defaults, **fields}, actor=ISSUER)


def authenticate(runtime, raw: str | None) -> Principal:
    with session_scope(runtime.engine) as session:
        return tokens.authenticate(session, raw)


def revoke(runtime, token_id: str, tenant: str = "acme") -> Any:
    with session_scope(runtime.engine) as session:
        return tokens.revoke(session, tenant=tenant, token_id=token_id, actor=ISSUER)


def audit_events(runtime, tenant: str = "acme") -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(AuditEvent.tenant == tenant).order_by(AuditEvent.seq)
        return list(session.scalars(statement).all())


def database_dump(runtime) -> str:
    """Every row of every table, as text."""
    lines = []
    with runtime.engine.connect() as connection:
        for table in metadata.sorted_tables:
            for row in connection.execute(table.select()):
                lines.append(f"{table.name}: {tuple(row)!r}")
    return "\n".join(lines)


def database_files(runtime) -> bytes:
    """The raw bytes of an SQLite database (file and write-ahead log); empty for PostgreSQL."""
    url = runtime.settings.resolved_database_url()
    if not url.startswith("sqlite:///"):
        return b""
    path = Path(url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


def assert_unauthenticated(runtime, raw: str | None) -> DomainError:
    with pytest.raises(DomainError) as caught:
        authenticate(runtime, raw)
    assert caught.value.code == "UNAUTHENTICATED"
    assert caught.value.category is Category.UNAUTHENTICATED
    assert caught.value.retryable is False
    return caught.value


# --- issue ------------------------------------------------------------------------------


def test_issue_returns_a_dg_secret_with_256_bits(runtime):
    issued = [issue(runtime) for _ in range(5)]

    for token in issued:
        assert TOKEN_SHAPE.match(token.token), token.token
        assert token.token_id.startswith("tok_")
        assert (token.tenant, token.subject, token.role, token.on_behalf_of) == (
            "acme",
            "bot",
            Role.AGENT,
            "cust-ada",
        )
    assert len({t.token for t in issued}) == 5
    assert len({t.token_id for t in issued}) == 5


def test_only_the_sha256_of_the_secret_is_stored(runtime):
    issued = issue(runtime)

    with Session(runtime.engine) as session:
        stored = session.get(ApiToken, issued.token_id)
    assert stored is not None
    assert stored.token_sha256 == hashlib.sha256(issued.token.encode()).hexdigest()


def test_the_raw_token_appears_nowhere_in_the_database(runtime):
    agent = issue(runtime, label="support bot")
    admin = issue(runtime, subject="root", role=Role.ADMIN)
    revoked = issue(runtime, subject="old-bot")
    revoke(runtime, revoked.token_id)
    authenticate(runtime, agent.token)
    # Refused credentials are audited too: with a prefix of their digest, never the secret.
    for presented in (revoked.token, "dg_" + "x" * 43):
        with pytest.raises(DomainError):
            ToolDoor(runtime, stdio_token=presented).call("list_orders", {}, new_trace_id(), None)
    ToolDoor(runtime, stdio_token=agent.token).call("list_orders", {}, new_trace_id(), None)

    dump = database_dump(runtime)
    raw_bytes = database_files(runtime)
    assert tokens.digest(agent.token) in dump  # the dump does see the tokens' rows
    assert "auth.refused" in dump
    for secret in (agent.token, admin.token, revoked.token, "dg_" + "x" * 43):
        body = secret.removeprefix("dg_")
        assert body not in dump
        assert body.encode() not in raw_bytes
    refused = [e for e in audit_events(runtime, "demo") if e.type == "auth.refused"]
    assert {e.data["token_sha256_prefix"] for e in refused} == {
        hashlib.sha256(revoked.token.encode()).hexdigest()[:12],
        hashlib.sha256(("dg_" + "x" * 43).encode()).hexdigest()[:12],
    }


def test_issue_is_audited_as_token_issued_without_the_secret(runtime):
    issued = issue(runtime, label="night shift")

    [event] = audit_events(runtime)
    assert event.type == "token.issued"
    assert event.actor == ISSUER
    assert event.data == {
        "token_id": issued.token_id,
        "subject": "bot",
        "role": "agent",
        "on_behalf_of": "cust-ada",
        "label": "night shift",
    }


def test_an_issue_that_rolls_back_leaves_neither_token_nor_event(runtime):
    issued: list[tokens.IssuedToken] = []

    def failing_unit_of_work() -> None:
        with session_scope(runtime.engine) as session:
            issued.append(
                tokens.issue(session, tenant="acme", subject="x", role=Role.ADMIN, actor=ISSUER)
            )
            raise RuntimeError("the operator's unit of work failed")

    with pytest.raises(RuntimeError):
        failing_unit_of_work()

    [issued] = issued
    assert_unauthenticated(runtime, issued.token)
    assert audit_events(runtime) == []
    with Session(runtime.engine) as session:
        assert session.get(ApiToken, issued.token_id) is None


@pytest.mark.parametrize("on_behalf_of", [None, ""])
def test_an_agent_token_requires_on_behalf_of(runtime, on_behalf_of):
    with pytest.raises(DomainError) as caught:
        issue(runtime, role=Role.AGENT, on_behalf_of=on_behalf_of)

    assert caught.value.category is Category.INVALID_ARGUMENT
    assert "on_behalf_of" in caught.value.message
    assert audit_events(runtime) == []


@pytest.mark.parametrize("role", [Role.APPROVER, Role.AUDITOR, Role.ADMIN])
def test_other_roles_refuse_on_behalf_of(runtime, role):
    with pytest.raises(DomainError) as caught:
        issue(runtime, subject="alice", role=role, on_behalf_of="cust-ada")

    assert caught.value.category is Category.INVALID_ARGUMENT
    assert audit_events(runtime) == []
    with Session(runtime.engine) as session:
        assert session.scalars(select(ApiToken)).all() == []


# --- authenticate -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "on_behalf_of"),
    [
        (Role.AGENT, "cust-ada"),
        (Role.APPROVER, None),
        (Role.AUDITOR, None),
        (Role.ADMIN, None),
    ],
)
def test_authenticate_resolves_the_principal(runtime, role, on_behalf_of):
    issued = issue(
        runtime, tenant="shop-b", subject="someone", role=role, on_behalf_of=on_behalf_of
    )

    principal = authenticate(runtime, issued.token)

    assert principal == Principal(
        tenant="shop-b",
        subject="someone",
        role=role,
        token_id=issued.token_id,
        on_behalf_of=on_behalf_of,
    )
    assert principal.actor == f"{role.value}:someone"


def test_authenticate_tells_tokens_apart(runtime):
    ada = issue(runtime, on_behalf_of="cust-ada")
    grace = issue(runtime, on_behalf_of="cust-grace")

    assert authenticate(runtime, ada.token).on_behalf_of == "cust-ada"
    assert authenticate(runtime, grace.token).on_behalf_of == "cust-grace"


@pytest.mark.parametrize(
    "presented",
    [
        pytest.param(None, id="missing"),
        pytest.param("", id="empty"),
        pytest.param("dg_" + "A" * 43, id="unknown"),
        pytest.param("not-a-token", id="garbage"),
    ],
)
def test_missing_and_unknown_tokens_are_unauthenticated(runtime, presented):
    issue(runtime)  # a real token exists; the presented one is not it

    assert_unauthenticated(runtime, presented)


def test_a_token_must_match_exactly(runtime):
    issued = issue(runtime)

    for variant in (issued.token.upper(), issued.token[:-1], issued.token + "x", issued.token[3:]):
        assert_unauthenticated(runtime, variant)
    assert_unauthenticated(runtime, tokens.digest(issued.token))  # the stored hash is no key


def test_a_revoked_token_is_unauthenticated(runtime):
    issued = issue(runtime)
    assert authenticate(runtime, issued.token).token_id == issued.token_id

    info = revoke(runtime, issued.token_id)

    assert info.revoked_at is not None
    error = assert_unauthenticated(runtime, issued.token)
    assert "revoked" in error.message


# --- revoke and list ----------------------------------------------------------------------


def test_revoke_is_audited_once(runtime):
    issued = issue(runtime)

    first = revoke(runtime, issued.token_id)
    again = revoke(runtime, issued.token_id)

    assert again.revoked_at == first.revoked_at
    types = [(e.type, e.data.get("token_id")) for e in audit_events(runtime)]
    assert types == [("token.issued", issued.token_id), ("token.revoked", issued.token_id)]
    revoked = audit_events(runtime)[-1]
    assert revoked.actor == ISSUER
    assert revoked.data == {"token_id": issued.token_id, "subject": "bot", "role": "agent"}


def test_revoke_only_touches_its_own_tenants_tokens(runtime):
    issued = issue(runtime, tenant="acme")

    for token_id, tenant in ((issued.token_id, "other"), ("tok_doesnotexist", "acme")):
        with pytest.raises(DomainError) as caught:
            revoke(runtime, token_id, tenant=tenant)
        assert caught.value.code == "TOKEN_UNAVAILABLE"
        assert caught.value.category is Category.UNAVAILABLE

    assert authenticate(runtime, issued.token).tenant == "acme"
    assert [e.type for e in audit_events(runtime, "other")] == []


def test_revoking_one_token_leaves_the_others_valid(runtime):
    keep, drop = issue(runtime), issue(runtime)

    revoke(runtime, drop.token_id)

    assert authenticate(runtime, keep.token).token_id == keep.token_id
    assert_unauthenticated(runtime, drop.token)


def test_list_shows_a_tenants_tokens_without_secrets(runtime):
    first = issue(runtime, label="one")
    second = issue(runtime, subject="alice", role=Role.APPROVER, label="two")
    issue(runtime, tenant="elsewhere")
    revoke(runtime, first.token_id)

    with session_scope(runtime.engine) as session:
        listed = tokens.list_tokens(session, tenant="acme")

    assert {i.token_id for i in listed} == {first.token_id, second.token_id}
    by_id = {i.token_id: i for i in listed}
    assert by_id[first.token_id].revoked_at is not None
    assert by_id[second.token_id].revoked_at is None
    assert by_id[second.token_id].role is Role.APPROVER
    text = repr([i.model_dump() for i in listed])
    assert first.token not in text
    assert second.token not in text
    assert "sha256" not in text


# --- doors that serve only some roles ---------------------------------------------------------


def test_a_door_for_some_roles_refuses_other_tokens_like_unknown_ones(runtime):
    agent = issue(runtime)
    approver = issue(runtime, subject="alice", role=Role.APPROVER)
    agents_only = frozenset({Role.AGENT})

    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, agent.token, allowed_roles=agents_only)
    assert principal.role is Role.AGENT

    with pytest.raises(DomainError) as caught, session_scope(runtime.engine) as session:
        tokens.authenticate(session, approver.token, allowed_roles=agents_only)
    assert caught.value.code == "UNAUTHENTICATED"
    assert caught.value.category is Category.UNAUTHENTICATED
    assert approver.token not in caught.value.message
