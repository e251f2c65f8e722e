"""Bearer-token authentication for the MCP door, with every refusal audited."""

from __future__ import annotations

import anyio
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.types import ASGIApp, Receive, Scope, Send

from service.db import session_scope
from service.errors import DomainError
from service.principal import Principal, Role
from service.runtime import Runtime
from service.tokens import actions as tokens
from service.tracing import trace_id_from

DOOR = "mcp"


class DraftgateTokenVerifier(TokenVerifier):
    """Resolves our opaque tokens. Only agent tokens may use the MCP door."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def verify_token(self, token: str) -> AccessToken | None:
        return await anyio.to_thread.run_sync(self._verify, token)

    def _verify(self, token: str) -> AccessToken | None:
        try:
            with session_scope(self._runtime.engine) as session:
                principal = tokens.authenticate(session, token)
        except DomainError as error:
            self._refuse(error.message, presented=token)
            return None
        if principal.role is not Role.AGENT:
            self._refuse(
                f"a {principal.role.value} token may not use the MCP door (agents only)",
                presented=token,
                tenant=principal.tenant,
            )
            return None
        return AccessToken(
            token=principal.token_id,  # the secret itself goes no further than this function
            client_id=principal.token_id,
            scopes=[principal.role.value],
            subject=principal.subject,
            claims={"tenant": principal.tenant, "on_behalf_of": principal.on_behalf_of},
        )

    def _refuse(self, reason: str, *, presented: str | None, tenant: str | None = None) -> None:
        with session_scope(self._runtime.engine) as session:
            tokens.record_refused_credential(
                session,
                tenant=tenant or self._runtime.settings.default_tenant,
                door=DOOR,
                reason=reason,
                presented=presented,
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


class AuditMissingCredentials:
    """ASGI wrapper: a request without a bearer token never reaches the verifier; audit it here."""

    def __init__(self, app: ASGIApp, runtime: Runtime) -> None:
        self._app = app
        self._runtime = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/mcp"):
            headers = {key.lower(): value for key, value in scope["headers"]}
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            if not authorization.lower().startswith("bearer ") or not authorization[7:].strip():
                traceparent = headers.get(b"traceparent", b"").decode("latin-1") or None
                await anyio.to_thread.run_sync(self._record, trace_id_from(traceparent))
        await self._app(scope, receive, send)

    def _record(self, trace_id: str) -> None:
        with session_scope(self._runtime.engine) as session:
            tokens.record_refused_credential(
                session,
                tenant=self._runtime.settings.default_tenant,
                door=DOOR,
                reason="no bearer token was presented",
                trace_id=trace_id,
            )
