"""Bearer-token authentication for the MCP door, with every refusal audited.

The door is an OAuth 2.1 resource server as the MCP authorization spec describes it: it
publishes RFC 9728 metadata, and every 401 names that metadata in ``WWW-Authenticate`` and
says in its body which credentials it takes (a draftgate token, or an OAuth access token
from the configured OpenID provider).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.routes import cors_middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.audit import refusals
from service.config import Settings
from service.errors import UNAUTHENTICATED, DomainError
from service.guards import client_address
from service.oidc.config import oidc_config
from service.oidc.metadata import challenge, how_to_authenticate, metadata_paths, resource_metadata
from service.principal import Principal, Role
from service.runtime import Runtime
from service.tokens.authentication import authenticate_presented, refuse_credential
from service.tracing import trace_id_from

DOOR = "mcp"


AGENTS_ONLY = frozenset({Role.AGENT})
# The trace id and client address of the HTTP request being served, set by CredentialAudit,
# so that a token refused by the verifier is audited under the caller's trace and counted
# against the caller's address.
request_trace_id: ContextVar[str | None] = ContextVar("request_trace_id", default=None)
request_source: ContextVar[str] = ContextVar("request_source", default="unknown")


@dataclass
class Refusal:
    """Why the verifier refused the request's token, for the 401 the SDK then answers."""

    message: str = "The bearer token is not recognised."
    check: str | None = None


# Set by CredentialAudit per request; the verifier (in a worker thread, on a copy of the
# context) fills in the same object.
request_refusal: ContextVar[Refusal | None] = ContextVar("request_refusal", default=None)


class DraftgateTokenVerifier(TokenVerifier):
    """Resolves draftgate tokens and OAuth access tokens; only agents may use the MCP door."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def verify_token(self, token: str) -> AccessToken | None:
        verify = partial(
            self._verify, token, request_trace_id.get(), request_source.get(), request_refusal.get()
        )
        return await anyio.to_thread.run_sync(verify)

    def _verify(
        self, token: str, trace_id: str | None, source: str, refusal: Refusal | None
    ) -> AccessToken | None:
        try:
            principal = authenticate_for_mcp(
                self._runtime, token, trace_id=trace_id, door=DOOR, source=source
            )
        except DomainError as error:
            if refusal is not None:
                refusal.message, refusal.check = error.message, error.details.get("check")
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
        # Over HTTP an OAuth token must be issued for this MCP server (RFC 8707); over stdio
        # only draftgate tokens are taken.
        audience=runtime.settings.mcp_public_url if door == DOOR else None,
    )


def request_caller(ctx: Any) -> tuple[Principal | None, str | None]:
    """Who sent this MCP request and in which trace: the principal of its verified access
    token (None over stdio, where the door proves the configured token), and its
    ``traceparent`` header (None without one, or over stdio)."""
    request = getattr(ctx, "request", None)
    traceparent = request.headers.get("traceparent") if request is not None else None
    access_token = get_access_token()
    return (principal_from(access_token) if access_token is not None else None), traceparent


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


def unauthorized(settings: Settings, error: DomainError, *, token_sent: bool) -> JSONResponse:
    """The MCP door's 401 (403 for a token without the required scope): a challenge naming
    the resource metadata, and a body saying how to authenticate (RFC 6750, RFC 9728)."""
    config = oidc_config(settings)
    resource = settings.mcp_public_url
    advice = how_to_authenticate(resource, config)
    status, oauth_error, scope = 401, "invalid_token" if token_sent else None, None
    if error.details.get("check") == "scope" and config is not None:
        status, oauth_error, scope = 403, "insufficient_scope", " ".join(config.required_scopes)
    body = UNAUTHENTICATED(error.message, suggested_action=advice, details=error.details)
    content = {**body.to_dict(), "error_description": f"{error.message} {advice}"}
    if oauth_error is not None:
        content["error"] = oauth_error
    header = challenge(resource, error=oauth_error, scope=scope)
    return JSONResponse(content, status_code=status, headers={"WWW-Authenticate": header})


def protected_resource_routes(settings: Settings) -> list[Route]:
    """RFC 9728 metadata of the MCP endpoint, at the path the RFC names and at the root (both
    are where MCP clients look); CORS-open like the SDK's own, for browser clients."""
    document = resource_metadata(
        settings.mcp_public_url, oidc_config(settings), name="draftgate MCP server"
    )

    async def metadata(_: Request) -> JSONResponse:
        return JSONResponse(document, headers={"Cache-Control": "public, max-age=3600"})

    endpoint = cors_middleware(metadata, ["GET", "OPTIONS"])
    return [
        Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"])
        for path in metadata_paths(settings.mcp_public_url)
    ]


class CredentialAudit:
    """ASGI wrapper for the MCP endpoint: remembers the request's trace id for the verifier,
    audits requests without a bearer token (they never reach the verifier) and answers them,
    and turns the SDK's bare 401 for a refused token into the door's own (``unauthorized``)."""

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
            await self._refuse_missing(scope, receive, send, trace_id, source)
            return
        refusal = Refusal()
        resets = (
            request_trace_id.set(trace_id),
            request_source.set(source),
            request_refusal.set(refusal),
        )
        try:
            await self._app(scope, receive, self._shaped(scope, receive, send, refusal))
        finally:
            request_trace_id.reset(resets[0])
            request_source.reset(resets[1])
            request_refusal.reset(resets[2])

    async def _refuse_missing(
        self, scope: Scope, receive: Receive, send: Send, trace_id: str, source: str
    ) -> None:
        error = UNAUTHENTICATED("No bearer token was presented.")
        missing = partial(
            refuse_credential, self._runtime, error, door=DOOR, source=source, trace_id=trace_id
        )
        await anyio.to_thread.run_sync(missing)
        response = unauthorized(self._runtime.settings, error, token_sent=False)
        await response(scope, receive, send)

    def _shaped(self, scope: Scope, receive: Receive, send: Send, refusal: Refusal) -> Send:
        """``send``, but the SDK's 401 (RequireAuthMiddleware's, with no body we can use and no
        public hook to change it) is replaced by the door's own; pinned by tests/oidc."""
        replaced = False

        async def send_shaped(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 401:
                replaced = True
                error = UNAUTHENTICATED(refusal.message, details=_check_of(refusal))
                response = unauthorized(self._runtime.settings, error, token_sent=True)
                await response(scope, receive, send)
            elif not replaced:
                await send(message)

        return send_shaped


def _check_of(refusal: Refusal) -> dict[str, str] | None:
    return {"check": refusal.check} if refusal.check else None


def refuser(runtime: Runtime) -> Callable[[Scope, Send, DomainError], Awaitable[None]]:
    """How the MCP door answers a request its guards refused before the SDK read it: audited
    (a bad or missing token is refused as unauthenticated first), then a JSON error."""

    async def refuse(scope: Scope, send: Send, error: DomainError) -> None:
        headers = {key.lower(): value for key, value in scope["headers"]}
        trace_id = trace_id_from(headers.get(b"traceparent", b"").decode("latin-1") or None)
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        token = authorization[7:].strip() if authorization.lower().startswith("bearer ") else None
        source = client_address(scope)
        audit_it = partial(_audited, runtime, token, trace_id, source, error)
        outcome = await anyio.to_thread.run_sync(audit_it)
        if outcome.code == "UNAUTHENTICATED":
            refusal = unauthorized(runtime.settings, outcome, token_sent=bool(token))
            await refusal(scope, _nothing_to_receive, send)
            return
        status = STATUS_BY_CODE.get(outcome.code, 400)
        retry_after = outcome.details.get("retry_after_seconds")
        headers = {"Retry-After": str(retry_after)} if retry_after else {}
        response = JSONResponse(outcome.to_dict(), status_code=status, headers=headers)
        await response(scope, _nothing_to_receive, send)

    return refuse


STATUS_BY_CODE = {"UNAUTHENTICATED": 401, "REQUEST_TOO_LARGE": 413, "RATE_LIMITED": 429}


def _audited(
    runtime: Runtime, token: str | None, trace_id: str, source: str, error: DomainError
) -> DomainError:
    """Audit a request refused before the SDK read it; the refusal to answer with (a bad or
    missing token is refused as unauthenticated first, and audited as that)."""
    if error.code == "RATE_LIMITED":  # a flood: no database work, no per-request token check
        refuse_credential(runtime, error, door=DOOR, source=source, trace_id=trace_id)
        return error
    try:
        principal = authenticate_for_mcp(
            runtime, token, trace_id=trace_id, door=DOOR, source=source
        )
    except DomainError as unauthenticated:
        return unauthenticated
    refusal = refusals.Refusal.by(principal, "request", error, trace_id=trace_id)
    throttle = refusals.Throttle(runtime.limiter, f"request:{DOOR}:{source}")
    refusals.record_refusal_apart(runtime.engine, refusal, throttle=throttle)
    return error


async def _nothing_to_receive() -> Message:
    return {"type": "http.disconnect"}
