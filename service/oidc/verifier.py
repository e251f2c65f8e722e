"""One verifier per process: a JWT access token in, a principal out."""

from __future__ import annotations

from functools import lru_cache

from service.oidc.config import OidcConfig
from service.oidc.keys import ProviderKeys
from service.oidc.principals import principal_from_claims
from service.oidc.tokens import verified_claims
from service.principal import Principal


@lru_cache(maxsize=8)
def provider_keys(config: OidcConfig) -> ProviderKeys:
    """The cached keys of ``config``'s issuer, shared by every request of this process."""
    return ProviderKeys(config)


def authenticate_jwt(config: OidcConfig, token: str, *, audience: str) -> Principal:
    """The principal of a JWT access token for ``audience``, or ``TokenRefused``."""
    claims = verified_claims(config, provider_keys(config), token, audience=audience)
    return principal_from_claims(config, claims)
