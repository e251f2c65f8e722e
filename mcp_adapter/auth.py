"""Bearer-token authentication for the MCP door, with every refusal audited."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

import anyio
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.audit import actions as audit
from service.db import run_unit, session_scope
from service.errors import DomainError
from service.principal import Principal, Role
from service.runtime import Runtime
from service.tokens import actions as tokens
from service.tracing import trace_id_from

DOOR = "mcp"


AGENTS_ONLY = frozenset({Role.AGENT})
# The trace id of the HTTP request being served, set by CredentialAudit, so that a
# token refused by the verifier is audited under the caller's trace.
request_trace_id: ContextVar[str | None] = ContextVar("request_trace_id", default=None)


class DraftgateTokenVerifier(TokenVerifier):
    """Resolves our opaque tokens. Only agent tokens may use the MCP door."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def verify_token(self, token: str) -> AccessToken | None:
        return await anyio.to_thread.run_sync(self._verify, token, request_trace_id.get())

    def _verify(self, token: str, trace_id: str | None) -> AccessToken | None:
        try:
            principal = authenticate_for_mcp(self._runtime, token, trace_id=trace_id, door=DOOR)
        except DomainError:
            return None
        return AccessToken(
            token=principal.token_id,  # the secret itself goes no further than this function
            client_id=principal.token_id,
            scopes=[principal.role.value],
            subject=principal.subject,
            claims={"tenant": principal.tenant, "on_behalf_of": principal.on_behalf_of},
        )


def authenticate_for_mcp(
    runtime: Runtime, token: str | None, *, trace_id: str | None, door: str
) -> Principal:
    """An agent principal, or UNAUTHENTICATED with the refusal audited (its own transaction)."""
    return run_unit(
        runtime.engine,
        lambda session: tokens.authenticate(session, token, allowed_roles=AGENTS_ONLY),
        on_refusal=lambda session, error: tokens.record_refused_credential(
            session,
            tenant=runtime.settings.default_tenant,
            door=door,
            reason=error.message,
            trace_id=trace_id,
            presented=token,
        ),
    )


def principal_from(access_token: AccessToken) -> Principal:
    claims = access_token.claims or {}
    assert access_token.subject is not None
    return Principal(
        tenant=str(claims["tenant"]),
        subject=access_token.subject,
        role=Role(access_token.scopes[0]),
        token_id=access_token.client_id,
        on_behalf_of=claims.get("on_behalf_of"),
    )


class CredentialAudit:
    """ASGI wrapper for the MCP endpoint: remembers the request's trace id for the verifier,
    and audits requests without a bearer token, which never reach the verifier."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self._app = app
        self._runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/mcp"):
            await self._app(scope, receive, send)
            return
        headers = {key.lower(): value for key, value in scope["headers"]}
        traceparent = headers.get(b"traceparent", b"").decode("latin-1") or None
        trace_id = trace_id_from(traceparent)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
            await anyio.to_thread.run_sync(self._record_missing, trace_id)
        reset = request_trace_id.set(trace_id)
        try:
            await self._app(scope, receive, send)
        finally:
            request_trace_id.reset(reset)

    def _record_missing(self, trace_id: str) -> None:
        with session_scope(self._runtime.engine) as session:
            tokens.record_refused_credential(
                session,
                tenant=self._runtime.settings.default_tenant,
                door=DOOR,
                reason="No bearer token was presented.",
                trace_id=trace_id,
            )


def refuser(runtime: Runtime) -> Callable[[Scope, Send, DomainError], Awaitable[None]]:
    """How the MCP door answers a request its guards refused before the SDK read it: audited
    (a bad or missing token is refused as unauthenticated first), then a JSON error."""

    async def refuse(scope: Scope, send: Send, error: DomainError) -> None:
        headers = {key.lower(): value for key, value in scope["headers"]}
        trace_id = trace_id_from(headers.get(b"traceparent", b"").decode("latin-1") or None)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else None
        outcome = await anyio.to_thread.run_sync(_audit_refusal, runtime, token, trace_id, error)
        status = {"UNAUTHENTICATED": 401, "REQUEST_TOO_LARGE": 413}.get(outcome.code, 400)
        response = JSONResponse(outcome.to_dict(), status_code=status)
        await response(scope, _nothing_to_receive, send)

    return refuse


def _audit_refusal(
    runtime: Runtime, token: str | None, trace_id: str, error: DomainError
) -> DomainError:
    try:
        principal = authenticate_for_mcp(runtime, token, trace_id=trace_id, door=DOOR)
    except DomainError as unauthenticated:
        return unauthenticated
    with session_scope(runtime.engine) as session:
        audit.record_refusal(
            session,
            tenant=principal.tenant,
            actor=principal.actor,
            operation="request",
            error=error,
            trace_id=trace_id,
        )
    return error


async def _nothing_to_receive() -> Message:
    return {"type": "http.disconnect"}
