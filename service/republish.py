"""When to publish a task again whose message may have been lost (an execution's, a webhook
delivery's): the sweeper waits twice as long after each publish, up to an hour, so a backlog
is not multiplied by re-publishing it."""

from __future__ import annotations

from datetime import timedelta

MAX_BACKOFF_SECONDS = 3_600


def backoff(publishes: int, *, after: float) -> timedelta:
    """The wait after the ``publishes``-th publish (1, 2, …): ``after · 2^(publishes - 1)``."""
    return timedelta(seconds=min(after * 2 ** (publishes - 1), MAX_BACKOFF_SECONDS))
