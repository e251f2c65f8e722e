"""A door's authentication (service/tokens/authentication.py) is a lookup, not a unit of work.

Issue 9: it ran as a write transaction of its own on every request; on SQLite its
``BEGIN IMMEDIATE`` took the database's write lock with nothing to write. Now it reads the
last committed state without a transaction to commit, so a revocation still counts from the
very next request, and a refusal is still audited, in a transaction of its own.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlmodel import Session

from service.audit.models import AuditEvent
from service.db import session_scope
from service.errors import DomainError
from service.principal import Principal, Role
from service.tokens import actions as tokens
from service.tokens.authentication import authenticate_presented
from tests.support.backends import both_backends, sqlite_only

# Resolving a token is a repository query: both backends (the on_sqlite ones aside).
pytestmark = both_backends

on_sqlite = sqlite_only


def issue(runtime) -> tokens.IssuedToken:
    with session_scope(runtime.engine) as session:
        return tokens.issue(
            session,
            tenant="acme",
            subject="bot",
            role=Role.AGENT,
            on_behalf_of="cust-ada",
            actor="operator:test",
        )


def present(runtime, secret: str | None) -> Principal:
    return authenticate_presented(
        runtime, secret, door="mcp", source="127.0.0.1", trace_id=None, limit_token=False
    )


@on_sqlite
def test_authentication_needs_no_write_lock(runtime, sqlite_url):
    issued = issue(runtime)
    other_process = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    other_process.execute("BEGIN IMMEDIATE")  # a writer elsewhere holds the database's lock
    found: list[Any] = []
    lookup = threading.Thread(target=lambda: found.append(present(runtime, issued.token)))
    try:
        lookup.start()
        lookup.join(5)
        assert found, "the token lookup waited for another writer's lock"
    finally:
        other_process.execute("ROLLBACK")
        other_process.close()
        lookup.join(35)
    assert found[0].token_id == issued.token_id


def test_authentication_commits_nothing(runtime):
    issued = issue(runtime)
    commits: list[object] = []
    event.listen(runtime.engine, "commit", commits.append)

    principal = present(runtime, issued.token)

    assert principal.subject == "bot"
    assert commits == [], "a lookup has nothing to commit"


def test_a_revocation_counts_from_the_very_next_lookup(runtime):
    issued = issue(runtime)
    assert present(runtime, issued.token).token_id == issued.token_id
    with session_scope(runtime.engine) as session:
        tokens.revoke(session, tenant="acme", token_id=issued.token_id, actor="operator:test")

    with pytest.raises(DomainError) as caught:
        present(runtime, issued.token)

    assert caught.value.code == "UNAUTHENTICATED"
    assert "revoked" in caught.value.message


def test_a_refused_token_is_still_audited(runtime):
    with pytest.raises(DomainError):
        present(runtime, "dg_not-a-token")

    with Session(runtime.engine) as session:
        refused = session.scalars(select(AuditEvent).where(AuditEvent.type == "auth.refused")).all()
    assert [event.data["door"] for event in refused] == ["mcp"]
