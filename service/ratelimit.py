"""Rate limits (the ``limits`` library): per client address, per token, and for refusals.

Counters live in memory for one process (``memory://``, the embedded default) or in Redis
(``DRAFTGATE_RATE_LIMIT_STORAGE_URL=redis://…``) so every replica shares them. A flood of
bad tokens is refused before it reaches the database, and its audit trail is aggregated:
the first refusals of a window are recorded one by one, the rest only as a count carried
by the next recorded refusal, so a flood cannot bloat the hash chain.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from limits import RateLimitItem, parse, storage, strategies
from sqlalchemy import Engine
from sqlmodel import Session

from service.db import session_scope
from service.errors import rate_limited


@dataclass(frozen=True)
class Limits:
    storage_url: str
    per_address: str  # e.g. "6000/minute"; empty: no limit
    per_token: str
    recorded_refusals: str  # refusals audited one by one per door and address


class RateLimiter:
    """One process's view of the shared counters."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits

    @cached_property
    def _limiter(self) -> strategies.FixedWindowRateLimiter:
        return strategies.FixedWindowRateLimiter(
            storage.storage_from_string(self._limits.storage_url)
        )

    @cached_property
    def _storage(self) -> storage.Storage:
        return self._limiter.storage

    def reset(self) -> None:
        """Forget every counter (tests that reuse one process's limiter start afresh)."""
        self._storage.reset()

    def check_address(self, address: str) -> None:
        """Refuse (RATE_LIMITED) once a client address passes its limit in the window."""
        if self._limits.per_address:
            self._hit(parse(self._limits.per_address), "address", address, "from this address")

    def check_token(self, token_digest: str) -> None:
        """Refuse once one credential passes its limit (keyed by the token's digest)."""
        if self._limits.per_token:
            self._hit(parse(self._limits.per_token), "token", token_digest, "with this token")

    def refusal_to_record(self, key: str) -> int | None:
        """Whether to audit one more refusal for ``key`` (a door and address): None to only
        count it; else how many were counted, unrecorded, since the last recorded one."""
        item = parse(self._limits.recorded_refusals)
        suppressed = f"draftgate/suppressed/{key}"
        if not self._limiter.hit(item, "refusals", key):
            self._storage.incr(suppressed, expiry=24 * 3600)
            return None
        count = int(self._storage.get(suppressed) or 0)
        if count:
            self._storage.clear(suppressed)
        return count

    def _hit(self, item: RateLimitItem, kind: str, key: str, scope: str) -> None:
        if not self._limiter.hit(item, kind, key):
            stats = self._limiter.get_window_stats(item, kind, key)
            raise rate_limited(scope, max(1, math.ceil(stats.reset_time - time.time())))


def record_throttled(
    engine: Engine,
    limiter: RateLimiter,
    key: str,
    write: Callable[[Session, dict[str, int]], None],
) -> None:
    """Audit a refusal unless this window already holds enough of ``key``'s; a written one
    carries ``{"suppressed_before": n}`` when n refusals went unrecorded since the last."""
    count = limiter.refusal_to_record(key)
    if count is None:
        return
    with session_scope(engine) as session:
        write(session, {"suppressed_before": count} if count else {})
