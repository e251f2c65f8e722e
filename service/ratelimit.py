"""Rate limits (the ``limits`` library): per client address, per token, and for refusals.

Counters live in memory for one process (``memory://``, the embedded default) or in Redis
(``DRAFTGATE_RATE_LIMIT_STORAGE_URL=redis://…``) so every replica shares them. A flood of
bad tokens is refused before it reaches the database, and its audit trail is aggregated:
the first refusals of a window are recorded one by one, the rest only as a count carried
by the next recorded refusal, so a flood cannot bloat the hash chain.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

from limits import RateLimitItem, parse, storage, strategies
from limits.errors import StorageError

from service.errors import rate_limited

logger = logging.getLogger(__name__)
T = TypeVar("T")
# A shared store that does not answer within this long counts as down (see RateLimiter).
STORAGE_TIMEOUT_SECONDS = 2.0


class InlineExpiryMemoryStorage(storage.MemoryStorage):
    """``limits``' in-memory counters without their clean-up thread.

    ``MemoryStorage`` starts a 10 ms ``threading.Timer`` on every hit once the previous one
    has fired: at tool-call rates that is a new thread per hit, ~0.3 ms each, twice per call
    (address and token). Its counters already expire when read, so the timer only frees
    memory of keys nobody asks for again; here that sweep runs inline, at most once every
    ``SWEEP_SECONDS``, by one thread at a time, and tolerates keys that a concurrent read
    expired meanwhile (the library's own sweep would raise KeyError in a request thread).
    """

    SWEEP_SECONDS = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.timer.cancel()  # the one the constructor started
        self._next_sweep = time.monotonic() + self.SWEEP_SECONDS
        self._sweeping = threading.Lock()

    def _MemoryStorage__schedule_expiry(self) -> None:  # replaces the parent's private hook
        now = time.monotonic()
        if now < self._next_sweep or not self._sweeping.acquire(blocking=False):
            return
        try:
            self._next_sweep = now + self.SWEEP_SECONDS
            self._sweep(time.time())
        finally:
            self._sweeping.release()

    def _sweep(self, now: float) -> None:
        """Forget the counters whose window ended (fixed windows: no moving-window events)."""
        for key, expiry in list(self.expirations.items()):
            if expiry <= now:
                self.storage.pop(key, None)
                self.expirations.pop(key, None)
                self.locks.pop(key, None)


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
        self._degraded = False  # counting locally since the shared store failed
        # Built now, in the thread that builds the runtime: built lazily by the first request
        # it raced the publisher's warm-up thread importing redis, and limits, finding the
        # half-imported module without a version, refused it (a 500 after every start).
        self._shared = self._shared_limiter()

    def _shared_limiter(self) -> strategies.FixedWindowRateLimiter:
        url = self._limits.storage_url
        if url.startswith("memory"):
            return strategies.FixedWindowRateLimiter(InlineExpiryMemoryStorage())
        # A store that hangs must not hang every request.
        options = {"socket_timeout": STORAGE_TIMEOUT_SECONDS}
        options["socket_connect_timeout"] = STORAGE_TIMEOUT_SECONDS
        store = storage.storage_from_string(url, wrap_exceptions=True, **options)
        return strategies.FixedWindowRateLimiter(store)

    @cached_property
    def _local(self) -> strategies.FixedWindowRateLimiter:
        return strategies.FixedWindowRateLimiter(InlineExpiryMemoryStorage())

    def _counted(self, count: Callable[[strategies.FixedWindowRateLimiter], T]) -> T:
        """``count`` on the shared counters, or on this process's own while the shared store
        is down. A Redis outage must neither crash every request (the topology run found
        500s on both doors) nor switch the limits off: each replica then counts alone, so
        the bound holds per replica, and every call tries the shared store first again."""
        try:
            result = count(self._shared)
        except StorageError as exc:
            if not self._degraded:  # once per outage, not once per request
                logger.warning("rate-limit store unavailable, counting in this process: %s", exc)
            self._degraded = True
            return count(self._local)
        if self._degraded:
            logger.warning("rate-limit store answers again: shared counters in use")
            self._degraded = False
        return result

    def reset(self) -> None:
        """Forget every counter (tests that reuse one process's limiter start afresh)."""
        self._shared.storage.reset()
        self._local.storage.reset()

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
        return self._counted(lambda limiter: _refusal_to_record(limiter, self._limits, key))

    def _hit(self, item: RateLimitItem, kind: str, key: str, scope: str) -> None:
        retry_after = self._counted(lambda limiter: _over_limit(limiter, item, kind, key))
        if retry_after is not None:
            raise rate_limited(scope, retry_after)


def _over_limit(
    limiter: strategies.FixedWindowRateLimiter, item: RateLimitItem, kind: str, key: str
) -> int | None:
    """Count one hit; None while within the limit, else the seconds until the window ends."""
    if limiter.hit(item, kind, key):
        return None
    stats = limiter.get_window_stats(item, kind, key)
    return max(1, math.ceil(stats.reset_time - time.time()))


def _refusal_to_record(
    limiter: strategies.FixedWindowRateLimiter, limits: Limits, key: str
) -> int | None:
    item = parse(limits.recorded_refusals)
    suppressed = f"draftgate/suppressed/{key}"
    if not limiter.hit(item, "refusals", key):
        limiter.storage.incr(suppressed, expiry=24 * 3600)
        return None
    count = int(limiter.storage.get(suppressed) or 0)
    if count:
        limiter.storage.clear(suppressed)
    return count
