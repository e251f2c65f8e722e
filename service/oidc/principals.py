"""From verified claims to a draftgate principal, by the claim names in the settings."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from service.oidc.config import OidcConfig
from service.oidc.refusals import TokenRefused, refused
from service.principal import Principal, Role
from service.tokens.schemas import SUBJECT_PATTERN, TENANT_PATTERN


def principal_from_claims(config: OidcConfig, claims: dict[str, Any]) -> Principal:
    """The principal the claims describe; ``TokenRefused`` ("claims") when one is missing.

    ``token_id`` names the OAuth client and subject (``oidc:`` + a digest), so a client's calls
    share one rate limit and the audit log can correlate them without holding the token."""
    subject = _claim(claims, config.subject_claim, SUBJECT_PATTERN)
    tenant = config.tenant or _claim(claims, config.tenant_claim, TENANT_PATTERN)
    role_name = _claim(claims, config.role_claim, r"^[a-z]{1,20}$")
    try:
        role = Role(role_name)
    except ValueError:
        raise refused("claims", f"its {config.role_claim} is not a draftgate role") from None
    on_behalf_of = None
    if role is Role.AGENT:  # an agent always acts for one end user (DESIGN.md §7)
        on_behalf_of = _claim(claims, config.on_behalf_of_claim, SUBJECT_PATTERN)
    client = str(claims.get("client_id") or claims.get("azp") or "")
    identity = f"{config.issuer} {client} {subject}".encode()
    return Principal(
        tenant=tenant,
        subject=subject,
        role=role,
        token_id="oidc:" + hashlib.sha256(identity).hexdigest()[:16],
        on_behalf_of=on_behalf_of,
    )


def _claim(claims: dict[str, Any], name: str, pattern: str) -> str:
    """A claim as draftgate's own tokens would spell it (the same patterns), or refused."""
    value = claims.get(name)
    if not isinstance(value, str) or re.fullmatch(pattern, value) is None:
        raise refused("claims", f"it has no usable {name} claim")
    return value


__all__ = ["TokenRefused", "principal_from_claims"]
