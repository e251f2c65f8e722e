"""A front door's authentication: a presented bearer secret becomes a principal, or the
refusal is audited (throttled, so a flood of bad tokens cannot bloat the chain).

Both HTTP doors call this one function; floods are turned away per client address before
it runs (service.guards), and each token has its own rate limit. A door that names its
``audience`` also takes OAuth access tokens from the configured OpenID provider (JWTs, told
apart from opaque tokens by their shape alone, so opaque tokens never wait on the network).
"""

from __future__ import annotations

from service.audit.refusals import Throttle, record_refusal_apart
from service.db import lookup_scope
from service.errors import UNAUTHENTICATED, DomainError
from service.oidc.config import oidc_config
from service.oidc.refusals import TokenRefused
from service.oidc.tokens import looks_like_jwt
from service.oidc.verifier import authenticate_jwt
from service.principal import Principal, Role
from service.runtime import Runtime
from service.tokens import actions as tokens


def authenticate_presented(
    runtime: Runtime,
    presented: str | None,
    *,
    door: str,
    source: str,
    trace_id: str | None,
    allowed_roles: frozenset[Role] | None = None,
    limit_token: bool = True,
    audience: str | None = None,
) -> Principal:
    """The principal of ``presented``, or UNAUTHENTICATED / RATE_LIMITED, audited.

    ``source`` is where the request came from (the client address), which is what a
    flood of refusals is counted by. ``limit_token=False`` leaves the per-token rate limit
    to the caller (the MCP door answers it as a tool error, not as a failed login).
    ``audience``: the door's canonical URI, which an OAuth access token must be issued for;
    None: this door takes draftgate tokens only.
    """
    try:
        principal = _principal_of(runtime, presented, allowed_roles, audience)
        if limit_token:
            runtime.limiter.check_token(principal.token_id)
    except DomainError as error:
        refuse_credential(
            runtime, error, door=door, source=source, trace_id=trace_id, presented=presented
        )
        raise
    return principal


def _principal_of(
    runtime: Runtime,
    presented: str | None,
    allowed_roles: frozenset[Role] | None,
    audience: str | None,
) -> Principal:
    config = None
    if presented and audience is not None and looks_like_jwt(presented):
        config = oidc_config(runtime.settings)
    if config is None or presented is None:
        # A lookup, not a unit of work: it writes nothing (a refusal is recorded by the
        # caller, in a transaction of its own), so it takes no write lock and commits nothing.
        with lookup_scope(runtime.engine) as session:
            return tokens.authenticate(session, presented, allowed_roles=allowed_roles)
    try:
        principal = authenticate_jwt(config, presented, audience=audience or "")
    except TokenRefused as refusal:
        raise UNAUTHENTICATED(refusal.message, details={"check": refusal.check}) from None
    if allowed_roles is not None and principal.role not in allowed_roles:
        accepted = ", ".join(sorted(role.value for role in allowed_roles))
        raise UNAUTHENTICATED(
            f"OAuth access tokens for role {principal.role.value} are not accepted here "
            f"(only {accepted}).",
            details={"check": "role"},
        )
    return principal


def refuse_credential(
    runtime: Runtime,
    error: DomainError,
    *,
    door: str,
    source: str,
    trace_id: str | None,
    presented: str | None = None,
) -> None:
    """Audit one refused credential (in the default tenant's chain: a refused credential
    proves no tenant), throttled per door and client address."""
    refusal = tokens.refused_credential(
        error,
        tenant=runtime.settings.default_tenant,
        door=door,
        trace_id=trace_id,
        presented=presented,
    )
    throttle = Throttle(runtime.limiter, f"auth:{door}:{source}")
    record_refusal_apart(runtime.engine, refusal, throttle=throttle)
