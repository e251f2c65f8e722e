"""Bearer-token authentication for the MCP door, with every refusal audited."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from functools import partial

import anyio
from mcp.server.auth.provider import AccessToken, TokenVerifier
from sqlmodel import Session
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.audit import actions as audit
from service.errors import DomainError
from service.guards import client_address
from service.principal import Principal, Role
from service.ratelimit import record_throttled
from service.runtime import Runtime
from service.tokens.authentication import authenticate_presented, record_refused
from service.tracing import trace_id_from

DOOR = "mcp"


AGENTS_ONLY = frozenset({Role.AGENT})
# The trace id and client address of the HTTP request being served, set by CredentialAudit,
# so that a token refused by the verifier is audited under the caller's trace and counted
# against the caller's address.
request_trace_id: ContextVar[str | None] = ContextVar("request_trace_id", default=None)
request_source: ContextVar[str] = ContextVar("request_source", default="unknown")


class DraftgateTokenVerifier(TokenVerifier):
    """Resolves our opaque tokens. Only agent tokens may use the MCP door."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def verify_token(self, token: str) -> AccessToken | None:
        verify = partial(self._verify, token, request_trace_id.get(), request_source.get())
        return await anyio.to_thread.run_sync(verify)

    def _verify(self, token: str, trace_id: str | None, source: str) -> AccessToken | None:
        try:
            principal = authenticate_for_mcp(
                self._runtime, token, trace_id=trace_id, door=DOOR, source=source
            )
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
    runtime: Runtime,
    token: str | None,
    *,
    trace_id: str | None,
    door: str,
    source: str = "stdio",
) -> Principal:
    """An agent principal, or UNAUTHENTICATED with the refusal audited (its own transaction).

    ``source``: the client address over HTTP; over stdio, the local process."""
    return authenticate_presented(
        runtime,
        token,
        door=door,
        source=source,
        trace_id=trace_id,
        allowed_roles=AGENTS_ONLY,
        limit_token=False,  # ToolDoor limits calls per token, answering as a tool error
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
        source = client_address(scope)
        if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
            missing = partial(
                record_refused,
                self._runtime,
                door=DOOR,
                source=source,
                reason="No bearer token was presented.",
                trace_id=trace_id,
            )
            await anyio.to_thread.run_sync(missing)
        trace_reset, source_reset = request_trace_id.set(trace_id), request_source.set(source)
        try:
            await self._app(scope, receive, send)
        finally:
            request_trace_id.reset(trace_reset)
            request_source.reset(source_reset)


def refuser(runtime: Runtime) -> Callable[[Scope, Send, DomainError], Awaitable[None]]:
    """How the MCP door answers a request its guards refused before the SDK read it: audited
    (a bad or missing token is refused as unauthenticated first), then a JSON error."""

    async def refuse(scope: Scope, send: Send, error: DomainError) -> None:
        headers = {key.lower(): value for key, value in scope["headers"]}
        trace_id = trace_id_from(headers.get(b"traceparent", b"").decode("latin-1") or None)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else None
        source = client_address(scope)
        audit_it = partial(_audit_refusal, runtime, token, trace_id, source, error)
        outcome = await anyio.to_thread.run_sync(audit_it)
        status = STATUS_BY_CODE.get(outcome.code, 400)
        retry_after = outcome.details.get("retry_after_seconds")
        headers = {"Retry-After": str(retry_after)} if retry_after else {}
        response = JSONResponse(outcome.to_dict(), status_code=status, headers=headers)
        await response(scope, _nothing_to_receive, send)

    return refuse


STATUS_BY_CODE = {"UNAUTHENTICATED": 401, "REQUEST_TOO_LARGE": 413, "RATE_LIMITED": 429}


def _audit_refusal(
    runtime: Runtime, token: str | None, trace_id: str, source: str, error: DomainError
) -> DomainError:
    if error.code == "RATE_LIMITED":  # a flood: no database work, no per-request token check
        record_refused(runtime, door=DOOR, source=source, reason=error.message, trace_id=trace_id)
        return error
    try:
        principal = authenticate_for_mcp(
            runtime, token, trace_id=trace_id, door=DOOR, source=source
        )
    except DomainError as unauthenticated:
        return unauthenticated

    def write(session: Session, extra: dict[str, int]) -> None:
        audit.record_refusal(
            session,
            tenant=principal.tenant,
            actor=principal.actor,
            operation="request",
            error=error,
            trace_id=trace_id,
            data=extra,
        )

    record_throttled(runtime.engine, runtime.limiter, f"request:{DOOR}:{source}", write)
    return error


async def _nothing_to_receive() -> Message:
    return {"type": "http.disconnect"}
