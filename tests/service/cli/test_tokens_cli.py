"""``draftgate tokens issue|list|revoke`` as an operator runs them, in-process (the installed
entry point is test_entry_point.py's), on SQLite and, where the database is the point, on
PostgreSQL too."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from sqlalchemy import select
from sqlmodel import Session
from typer.testing import Result

from service.audit.models import AuditEvent
from service.db import session_scope
from service.errors import DomainError
from service.principal import Role
from service.tokens import actions as tokens
from service.tokens.models import ApiToken
from tests.support import cli
from tests.support.backends import both_backends

TOKEN_SHAPE = re.compile(r"^dg_[A-Za-z0-9_-]{43}$")


def run_cli(runtime, *args: str) -> Result:
    return cli.run(*args, env=cli.operator_env(runtime, DRAFTGATE_DEFAULT_TENANT="acme"))


def issue_json(runtime, *args: str) -> dict:
    result = run_cli(runtime, "tokens", "issue", *args, "--json")
    assert result.exit_code == 0, result.stderr
    issued: dict = json.loads(result.stdout)
    return issued


def authenticate(runtime, raw: str):
    with session_scope(runtime.engine) as session:
        return tokens.authenticate(session, raw)


def events(runtime, tenant: str = "acme") -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = select(AuditEvent).where(AuditEvent.tenant == tenant).order_by(AuditEvent.seq)
        return list(session.scalars(statement).all())


@both_backends
def test_issue_an_agent_token_as_json(runtime):
    issued = issue_json(
        runtime, "--subject", "x", "--role", "agent", "--on-behalf-of", "cust", "--label", "l1"
    )

    assert set(issued) == {"token_id", "token", "tenant", "subject", "role", "on_behalf_of"}
    assert TOKEN_SHAPE.match(issued["token"])
    assert issued["token_id"].startswith("tok_")
    assert (issued["tenant"], issued["subject"], issued["role"], issued["on_behalf_of"]) == (
        "acme",
        "x",
        "agent",
        "cust",
    )
    principal = authenticate(runtime, issued["token"])
    assert (principal.tenant, principal.subject, principal.role, principal.on_behalf_of) == (
        "acme",
        "x",
        Role.AGENT,
        "cust",
    )
    with Session(runtime.engine) as session:
        stored = session.get(ApiToken, issued["token_id"])
    assert stored is not None
    assert stored.token_sha256 == hashlib.sha256(issued["token"].encode()).hexdigest()
    assert stored.label == "l1"
    [event] = events(runtime)
    assert (event.type, event.actor, event.data["token_id"]) == (
        "token.issued",
        "operator:cli",
        issued["token_id"],
    )


def test_issue_in_plain_text_shows_the_secret_once_with_a_warning(runtime):
    result = run_cli(
        runtime, "tokens", "issue", "--subject", "alice", "--role", "approver", "--tenant", "t2"
    )

    assert result.exit_code == 0, result.stderr
    token_id = re.search(r"token id: (tok_\w+)", result.stdout).group(1)
    secret = re.search(r"token:\s+(\S+)", result.stdout).group(1)
    assert TOKEN_SHAPE.match(secret)
    assert "cannot be shown again" in result.stderr
    principal = authenticate(runtime, secret)
    assert (principal.tenant, principal.token_id, principal.role) == ("t2", token_id, Role.APPROVER)


def test_an_agent_token_without_on_behalf_of_is_refused(runtime):
    result = run_cli(runtime, "tokens", "issue", "--subject", "bot", "--role", "agent")

    assert result.exit_code == 1
    assert "on_behalf_of" in result.stderr
    assert "Traceback" not in result.stderr
    assert "dg_" not in result.stdout
    assert events(runtime) == []


def test_an_approver_token_with_on_behalf_of_is_refused(runtime):
    result = run_cli(
        runtime,
        "tokens",
        "issue",
        "--subject",
        "alice",
        "--role",
        "approver",
        "--on-behalf-of",
        "cust",
    )

    assert result.exit_code == 1
    assert "error:" in result.stderr
    assert events(runtime) == []


def test_an_unknown_role_is_a_usage_error(runtime):
    result = run_cli(runtime, "tokens", "issue", "--subject", "x", "--role", "superuser")

    assert result.exit_code == 2
    assert "--role" in result.stderr
    assert events(runtime) == []


@both_backends
def test_list_shows_ids_but_never_secrets(runtime):
    agent = issue_json(runtime, "--subject", "bot", "--role", "agent", "--on-behalf-of", "cust")
    auditor = issue_json(runtime, "--subject", "audrey", "--role", "auditor", "--label", "audits")
    elsewhere = issue_json(runtime, "--subject", "zed", "--role", "admin", "--tenant", "other")

    table = run_cli(runtime, "tokens", "list")
    as_json = run_cli(runtime, "tokens", "list", "--json")

    assert table.exit_code == 0, table.stderr
    assert as_json.exit_code == 0, as_json.stderr
    listed = json.loads(as_json.stdout)
    assert [row["token_id"] for row in listed] == [agent["token_id"], auditor["token_id"]]
    assert {row["role"] for row in listed} == {"agent", "auditor"}
    assert all(row["revoked_at"] is None for row in listed)
    assert agent["token_id"] in table.stdout
    assert auditor["token_id"] in table.stdout
    assert "audits" in table.stdout
    assert elsewhere["token_id"] not in table.stdout + as_json.stdout
    for issued in (agent, auditor, elsewhere):
        assert issued["token"] not in table.stdout + as_json.stdout
        assert issued["token"][3:] not in table.stdout + as_json.stdout


@both_backends
def test_revoke_refuses_the_token_from_then_on(runtime):
    issued = issue_json(runtime, "--subject", "bot", "--role", "agent", "--on-behalf-of", "cust")
    assert authenticate(runtime, issued["token"]).token_id == issued["token_id"]

    result = run_cli(runtime, "tokens", "revoke", issued["token_id"])

    assert result.exit_code == 0, result.stderr
    assert f"revoked {issued['token_id']}" in result.stdout
    with pytest.raises(DomainError) as caught:
        authenticate(runtime, issued["token"])
    assert caught.value.code == "UNAUTHENTICATED"
    listed = json.loads(run_cli(runtime, "tokens", "list", "--json").stdout)
    assert listed[0]["revoked_at"] is not None
    assert [e.type for e in events(runtime)] == ["token.issued", "token.revoked"]
    assert events(runtime)[-1].data["token_id"] == issued["token_id"]


def test_revoking_an_unknown_token_fails_cleanly(runtime):
    result = run_cli(runtime, "tokens", "revoke", "tok_0000000000000000")

    assert result.exit_code == 1
    assert "TOKEN_UNAVAILABLE" in result.stderr
    assert "Traceback" not in result.stderr


@both_backends
def test_revoke_is_scoped_to_the_tenant(runtime):
    issued = issue_json(runtime, "--subject", "zed", "--role", "admin", "--tenant", "other")

    wrong = run_cli(runtime, "tokens", "revoke", issued["token_id"])  # default tenant: acme
    right = run_cli(runtime, "tokens", "revoke", issued["token_id"], "--tenant", "other")

    assert wrong.exit_code == 1
    assert right.exit_code == 0, right.stderr


def test_an_empty_subject_is_refused(runtime):
    result = run_cli(runtime, "tokens", "issue", "--subject", "", "--role", "admin")

    assert result.exit_code != 0, "a token for an empty subject was issued"
    assert "Traceback" not in result.stderr


@both_backends
def test_an_overlong_subject_is_refused_cleanly_on_every_backend(runtime):
    result = run_cli(runtime, "tokens", "issue", "--subject", "a" * 200, "--role", "admin")

    assert result.exit_code == 1, "a subject longer than the column (128) was accepted"
    assert result.stderr.startswith("error:"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
