"""Verifying a JWT access token: algorithm, key, signature, issuer, audience, time, scopes.

Each check that fails names itself (``TokenRefused.check``), so the audit log says why a
token was refused; nothing of the token is repeated.
"""

from __future__ import annotations

import re
from typing import Any

from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ClaimError,
    ExpiredTokenError,
    JoseError,
    MissingClaimError,
)
from joserfc.jws import extract_compact
from joserfc.jwt import JWTClaimsRegistry

from service.oidc.config import OidcConfig
from service.oidc.keys import ProviderKeys
from service.oidc.refusals import TokenRefused, refused

# The compact JWS form: three base64url parts. Opaque draftgate tokens (dg_ + base64url) have
# no dot, so telling the two apart costs one regular expression and no network.
_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
MAX_TOKEN_CHARS = 16_384


def looks_like_jwt(presented: str) -> bool:
    return _COMPACT_JWS.fullmatch(presented) is not None


def verified_claims(
    config: OidcConfig, keys: ProviderKeys, token: str, *, audience: str
) -> dict[str, Any]:
    """The claims of ``token`` once every check passed; ``TokenRefused`` naming the first that
    failed otherwise. ``audience``: this door's canonical URI (RFC 8707 resource)."""
    if len(token) > MAX_TOKEN_CHARS or not looks_like_jwt(token):
        raise refused("malformed", "it is not a compact JWS")
    try:
        header = extract_compact(token.encode()).headers()
    except (JoseError, ValueError) as error:
        raise refused("malformed", "its header cannot be read") from error
    algorithm = header.get("alg")
    if algorithm not in config.algorithms:
        allowed = ", ".join(config.algorithms)
        raise refused("algorithm", f"its algorithm is not one of {allowed}")
    kid = header.get("kid")
    key = keys.key_for(kid if isinstance(kid, str) else None)
    try:
        claims = jwt.decode(token, key, algorithms=[algorithm]).claims
    except BadSignatureError as error:
        raise refused("signature", "its signature does not verify") from error
    except (JoseError, ValueError) as error:
        raise refused("malformed", "it cannot be verified with the provider's key") from error
    _check_claims(config, claims, audience)
    _check_scopes(config, claims)
    return claims


def _check_claims(config: OidcConfig, claims: dict[str, Any], audience: str) -> None:
    checks: list[tuple[str, JWTClaimsRegistry, str]] = [
        (
            "issuer",
            JWTClaimsRegistry(iss={"essential": True, "value": config.issuer}),
            f"it was not issued by {config.issuer}",
        ),
        (
            "audience",
            JWTClaimsRegistry(aud={"essential": True, "value": audience}),
            f"its audience does not include {audience}",
        ),
    ]
    for check, registry, detail in checks:
        try:
            registry.validate({name: claims.get(name) for name in registry.options})
        except ClaimError as error:
            raise refused(check, detail) from error
    _check_times(config, claims)


def _check_times(config: OidcConfig, claims: dict[str, Any]) -> None:
    registry = JWTClaimsRegistry(leeway=config.clock_skew_seconds, exp={"essential": True})
    times: dict[str, Any] = {n: claims[n] for n in ("exp", "nbf", "iat") if n in claims}
    try:
        registry.validate(times)
    except ExpiredTokenError as error:
        raise refused("expired", "it has expired") from error
    except MissingClaimError as error:
        raise refused("expired", "it has no expiry (exp)") from error
    except ClaimError as error:
        check = "expired" if error.claim == "exp" else "not_yet_valid"
        raise refused(check, f"its {error.claim} is in the future or unreadable") from error


def _check_scopes(config: OidcConfig, claims: dict[str, Any]) -> None:
    missing = sorted(set(config.required_scopes) - granted_scopes(claims))
    if missing:
        raise refused("scope", f"it lacks the scope {' '.join(missing)}")


def granted_scopes(claims: dict[str, Any]) -> set[str]:
    """RFC 9068 ``scope`` (space-separated); some providers send ``scp`` as a list."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return set(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list):
        return {item for item in scp if isinstance(item, str)}
    if isinstance(scp, str):
        return set(scp.split())
    return set()


__all__ = ["TokenRefused", "granted_scopes", "looks_like_jwt", "verified_claims"]
