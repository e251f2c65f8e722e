"""The OpenID settings as one immutable value (a cache key for the provider's keys)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from service.config import Settings

# Symmetric algorithms would let anyone holding the (public) verification key sign tokens,
# and "none" signs nothing: neither may ever be configured.
FORBIDDEN_ALGORITHMS = frozenset({"none", "HS256", "HS384", "HS512"})


class OidcConfigError(ValueError):
    """The OpenID settings cannot be used (named in the message)."""


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    required_scopes: tuple[str, ...]
    algorithms: tuple[str, ...]
    subject_claim: str
    role_claim: str
    tenant_claim: str
    tenant: str
    on_behalf_of_claim: str
    clock_skew_seconds: int
    cache_seconds: int
    min_refresh_seconds: float
    max_stale_seconds: int
    http_timeout_seconds: float


def oidc_config(settings: Settings) -> OidcConfig | None:
    """The OpenID settings, or None when OAuth resource-server mode is off."""
    if not settings.oidc_issuer:
        return None
    algorithms = tuple(settings.oidc_algorithms)
    forbidden = sorted(
        a for a in algorithms if a in FORBIDDEN_ALGORITHMS or a.upper().startswith("HS")
    )
    if forbidden or not algorithms:
        raise OidcConfigError(
            "DRAFTGATE_OIDC_ALGORITHMS must list asymmetric algorithms only"
            + (f" (not {', '.join(forbidden)})" if forbidden else "")
        )
    if not secure_url(settings.oidc_issuer):
        raise OidcConfigError(
            "DRAFTGATE_OIDC_ISSUER must be the provider's https issuer URL "
            "(http only to a loopback address)"
        )
    return OidcConfig(
        issuer=settings.oidc_issuer,
        required_scopes=tuple(settings.oidc_required_scopes),
        algorithms=algorithms,
        subject_claim=settings.oidc_subject_claim,
        role_claim=settings.oidc_role_claim,
        tenant_claim=settings.oidc_tenant_claim,
        tenant=settings.oidc_tenant,
        on_behalf_of_claim=settings.oidc_on_behalf_of_claim,
        clock_skew_seconds=settings.oidc_clock_skew_seconds,
        cache_seconds=settings.oidc_jwks_cache_seconds,
        min_refresh_seconds=settings.oidc_jwks_min_refresh_seconds,
        max_stale_seconds=settings.oidc_jwks_max_stale_seconds,
        http_timeout_seconds=settings.oidc_http_timeout_seconds,
    )


def secure_url(url: str) -> bool:
    """https, or http to this machine: the keys that decide who may act must not travel where
    anyone on the network can replace them (a provider on loopback is a test or a sidecar)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    if not host:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and _loopback(host))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: only "localhost" is known to stay on this machine
        return False
