"""RFC 9728 protected-resource metadata, and the WWW-Authenticate challenge that points to it.

Both doors describe themselves the same way: their canonical URI as ``resource``, the
configured OpenID issuer as their authorization server. Without an issuer there is no
authorization server a client could use, so ``authorization_servers`` is left out
(RFC 9728 §2 makes it optional): the document then says "bearer tokens, from no OAuth
server", and the 401's message says to use a draftgate token
(docs/decisions/protected-resource-metadata-own.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from service.oidc.config import OidcConfig

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known path inserted between the host and the resource's path
    (``https://h/mcp`` -> ``https://h/.well-known/oauth-protected-resource/mcp``)."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{path}"


def metadata_paths(resource: str) -> list[str]:
    """Where the document is served: the path RFC 9728 names for ``resource``, and the root
    form, which MCP clients (2025-11-25 authorization spec) try when the 401 names none."""
    path = WELL_KNOWN + urlsplit(resource).path.rstrip("/")
    return [path] if path == WELL_KNOWN else [path, WELL_KNOWN]


def resource_metadata(resource: str, config: OidcConfig | None, *, name: str) -> dict[str, Any]:
    """The protected-resource metadata document of ``resource``."""
    document: dict[str, Any] = {"resource": resource}
    if config is not None:
        document["authorization_servers"] = [config.issuer]
        if config.required_scopes:
            document["scopes_supported"] = list(config.required_scopes)
    document["bearer_methods_supported"] = ["header"]
    document["resource_name"] = name
    return document


def challenge(resource: str, *, error: str | None = None, scope: str | None = None) -> str:
    """The ``WWW-Authenticate`` value of a refusal (RFC 6750 §3, RFC 9728 §5.1): no ``error``
    when no token was sent, ``invalid_token`` or ``insufficient_scope`` when one was."""
    parts = []
    if error is not None:
        parts.append(f'error="{error}"')
    if scope:
        parts.append(f'scope="{scope}"')
    parts.append(f'resource_metadata="{metadata_url(resource)}"')
    return "Bearer " + ", ".join(parts)


def how_to_authenticate(resource: str, config: OidcConfig | None) -> str:
    """One sentence for a 401: which credentials this door takes."""
    own = "a draftgate token (`draftgate tokens issue`)"
    if config is None:
        return f"Send `Authorization: Bearer <token>` with {own}."
    scopes = " ".join(config.required_scopes)
    scope_text = f" and scope `{scopes}`" if scopes else ""
    return (
        f"Send `Authorization: Bearer <token>` with {own}, or with an OAuth access token from "
        f"{config.issuer} requested for the resource {resource}{scope_text}."
    )
