"""A front door's authentication: a presented bearer secret becomes a principal, or the
refusal is audited (throttled, so a flood of bad tokens cannot bloat the chain).

Both HTTP doors call this one function; floods are turned away per client address before
it runs (service.guards), and each token has its own rate limit.
"""

from __future__ import annotations

from sqlmodel import Session

from service.db import lookup_scope
from service.errors import DomainError
from service.principal import Principal, Role
from service.ratelimit import record_throttled
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
) -> Principal:
    """The principal of ``presented``, or UNAUTHENTICATED / RATE_LIMITED, audited.

    ``source`` is where the request came from (the client address), which is what a
    flood of refusals is counted by. ``limit_token=False`` leaves the per-token rate limit
    to the caller (the MCP door answers it as a tool error, not as a failed login).
    """
    try:
        # A lookup, not a unit of work: it writes nothing (a refusal is recorded below, in a
        # transaction of its own), so it takes no write lock and commits nothing.
        with lookup_scope(runtime.engine) as session:
            principal = tokens.authenticate(session, presented, allowed_roles=allowed_roles)
        if limit_token:
            runtime.limiter.check_token(principal.token_id)
    except DomainError as error:
        record_refused(
            runtime,
            door=door,
            source=source,
            reason=error.message,
            trace_id=trace_id,
            presented=presented,
        )
        raise
    return principal


def record_refused(
    runtime: Runtime,
    *,
    door: str,
    source: str,
    reason: str,
    trace_id: str | None,
    presented: str | None = None,
) -> None:
    """Audit one refused credential (in the default tenant's chain), throttled per source."""

    def write(session: Session, extra: dict[str, int]) -> None:
        tokens.record_refused_credential(
            session,
            tenant=runtime.settings.default_tenant,
            door=door,
            reason=reason,
            trace_id=trace_id,
            presented=presented,
            extra=extra,
        )

    record_throttled(runtime.engine, runtime.limiter, f"auth:{door}:{source}", write)
