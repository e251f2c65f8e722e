"""The API as an OAuth protected resource: its RFC 9728 metadata, and the 401 challenge that
points to it (RFC 9728 §5.1), so a client can find the OpenID provider it takes tokens from."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.config import Settings
from service.oidc.config import oidc_config
from service.oidc.metadata import challenge, metadata_paths, resource_metadata


def protected_resource_router(settings: Settings) -> APIRouter:
    """GET the metadata at the well-known path(s) of ``api_public_url``."""
    document = resource_metadata(
        settings.api_public_url, oidc_config(settings), name="draftgate HTTP API"
    )
    router = APIRouter(tags=["health"])

    def protected_resource_metadata() -> JSONResponse:
        headers = {"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"}
        return JSONResponse(document, headers=headers)

    for number, path in enumerate(metadata_paths(settings.api_public_url)):
        router.add_api_route(
            path,
            protected_resource_metadata,
            methods=["GET"],
            name=f"well_known.protected_resource{'.root' if number else ''}",
            summary="OAuth protected-resource metadata (RFC 9728)",
            include_in_schema=False,  # a protocol document, not part of the API's contract
        )
    return router


class ResourceChallenge:
    """Every 401 of the /v1 API names the resource metadata in ``WWW-Authenticate``: without
    ``error`` when no bearer token was sent, ``error="invalid_token"`` when one was refused.
    The problem+json body stays what the error handlers made it."""

    def __init__(self, app: ASGIApp, *, resource: str) -> None:
        self._app = app
        self._resource = resource

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The /v1 routes are the protected resource; /metrics has a token of its own.
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self._app(scope, receive, send)
            return
        authorization = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        sent = authorization.lower().startswith("bearer ") and bool(authorization[7:].strip())
        value = challenge(self._resource, error="invalid_token" if sent else None)

        async def send_challenged(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                MutableHeaders(scope=message)["WWW-Authenticate"] = value
            await send(message)

        await self._app(scope, receive, send_challenged)
