"""Tokens an attacker (or a misconfigured client) presents, and how to read their refusal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import httpx
from joserfc.jwk import RSAKey
from sqlmodel import col, select

from service.audit.models import AuditEvent
from service.db import session_scope
from service.runtime import Runtime
from tests.oidc.provider_process import OidcProvider

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def header_of(token: str) -> dict[str, Any]:
    part = token.split(".", maxsplit=1)[0]
    parsed: dict[str, Any] = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    return parsed


def unsigned(token: str) -> str:
    """The same claims under ``alg: none`` and no signature."""
    header = {**header_of(token), "alg": "none"}
    return f"{_b64(json.dumps(header).encode())}.{token.split('.')[1]}."


def hs256_with_public_key(token: str, provider: OidcProvider) -> str:
    """The same claims signed HS256 with the provider's PUBLIC key as the HMAC secret (the
    classic key-confusion forgery: a verifier that lets the token pick the algorithm accepts)."""
    jwks = httpx.get(f"{provider.issuer}/jwks", timeout=10).json()
    public_pem = RSAKey.import_key(jwks["keys"][0]).as_pem(private=False)
    header = {**header_of(token), "alg": "HS256"}
    signing_input = f"{_b64(json.dumps(header).encode())}.{token.split('.')[1]}"
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def tampered(token: str) -> str:
    """A valid token whose claims were edited after signing (another end user)."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["draftgate_on_behalf_of"] = "cust-grace"
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


def last_event_id(runtime: Runtime) -> int:
    with session_scope(runtime.engine) as session:
        newest = session.exec(select(AuditEvent.id).order_by(col(AuditEvent.id).desc())).first()
    return newest or 0


def events_after(runtime: Runtime, event_id: int) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        statement = select(AuditEvent).where(col(AuditEvent.id) > event_id)
        return list(session.exec(statement.order_by(col(AuditEvent.id))).all())


def stored_audit_text(runtime: Runtime) -> str:
    with session_scope(runtime.engine) as session:
        rows = session.exec(select(AuditEvent)).all()
        return json.dumps([row.model_dump(mode="json") for row in rows])
