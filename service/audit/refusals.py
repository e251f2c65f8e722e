"""The one way a refusal is audited, whichever door, screen or worker met it (DESIGN.md §8).

Its audit shape is decided here, once (docs/audit.md, "Refusals"):

- ``type``: ``<operation>.refused``, where the operation names what was refused: a route's
  name (``approval``, ``webhooks.create``, ``console.execution``), ``tool`` (an MCP tool call),
  ``auth`` (a credential), ``request`` / ``console.request`` (a request refused before any
  route ran), ``execution`` (the worker's claim). A refusal that means stored rows were
  tampered with is a security event: ``security.<operation>_refused``.
- ``actor``: the principal the request's credential proved, else ``anonymous``; ``tenant``:
  that principal's, else the deployment's default tenant (refused credentials have none).
- ``data``: the refusal's context, masked (below); ``error``: the error's audit form
  (``DomainError.audit_form``: code, category, message); and ``suppressed_before`` when a
  flood left that many refusals unrecorded since the last recorded one.

Context is masked here, not by each caller: every string is made inert (no control, bidi or
invisible characters) and cut to ``MAX_TEXT``, lists and mappings to ``MAX_ITEMS`` entries;
only integers, booleans and None pass as they are. Callers put names in it (a route, a tool,
argument names, a door), never the values a caller sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session

from service.audit import actions as audit
from service.db import session_scope
from service.errors import DomainError
from service.principal import Principal
from service.ratelimit import RateLimiter
from service.text import inert

ANONYMOUS = "anonymous"
MAX_TEXT = 256
MAX_ITEMS = 32


@dataclass(frozen=True)
class Refusal:
    """One refused attempt, described by whoever refused it; ``record_refusal`` audits it."""

    operation: str
    error: DomainError
    tenant: str
    actor: str = ANONYMOUS
    draft_id: str | None = None
    execution_id: str | None = None
    trace_id: str | None = None
    context: Mapping[str, Any] = field(default_factory=dict)
    security: bool = False

    @classmethod
    def by(cls, principal: Principal, operation: str, error: DomainError, **kw: Any) -> Refusal:
        """A refusal of something ``principal`` (proved by its credential) asked for."""
        return cls(operation, error, principal.tenant, principal.actor, **kw)

    @property
    def type(self) -> str:
        if self.security:
            return f"security.{self.operation}_refused"
        return f"{self.operation}.refused"


@dataclass(frozen=True)
class Throttle:
    """Record at most the limiter's budget of refusals per window for ``key`` (a door and a
    client address, a token): a flood is audited as a count, never one event per request."""

    limiter: RateLimiter
    key: str


def record_refusal(session: Session, refusal: Refusal, *, suppressed_before: int = 0) -> None:
    """Audit ``refusal`` in the unit of work of ``session`` (it commits with it)."""
    data = {str(key): masked(value) for key, value in refusal.context.items()}
    data["error"] = refusal.error.audit_form()
    if suppressed_before:
        data["suppressed_before"] = suppressed_before
    audit.record(
        session,
        tenant=refusal.tenant,
        actor=refusal.actor,
        type=refusal.type,
        draft_id=_bounded_id(refusal.draft_id),
        execution_id=_bounded_id(refusal.execution_id),
        trace_id=refusal.trace_id,
        data=data,
    )


def record_refusal_apart(
    engine: Engine, refusal: Refusal, *, throttle: Throttle | None = None
) -> None:
    """Audit ``refusal`` in a transaction of its own (the refused work was rolled back, or
    never began); with ``throttle``, only within its budget."""
    suppressed = 0
    if throttle is not None:
        count = throttle.limiter.refusal_to_record(throttle.key)
        if count is None:
            return
        suppressed = count
    with session_scope(engine) as session:
        record_refusal(session, refusal, suppressed_before=suppressed)


def request_context(method: str, path: str) -> dict[str, str]:
    """What a refused HTTP request is described by: its method and path (never its query,
    which may carry a credential, nor its body)."""
    return {"method": method, "path": path}


def masked(value: Any) -> Any:
    """A context value as the audit log keeps it (see the module's docstring)."""
    if value is None or isinstance(value, bool | int):  # (a float may be NaN: not JSON)
        return value
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_ITEMS]
        return {masked(str(key)): masked(item) for key, item in items}
    if isinstance(value, list | tuple):
        return [masked(item) for item in value[:MAX_ITEMS]]
    return inert(str(value))[:MAX_TEXT]


def _bounded_id(value: str | None) -> str | None:
    # Ids may come from a request's path (a refusal names what was asked for, existing or not).
    return inert(value)[:64] if value is not None else None
