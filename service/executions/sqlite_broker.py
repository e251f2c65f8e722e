"""kombu's SQLAlchemy transport over SQLite, woken by a commit instead of a blind sleep.

kombu's virtual transports poll: after an empty ``_get`` the consumer sleeps
``polling_interval`` (1 s) whatever happens meanwhile, so an approved execution waited half
a second on average before the worker even looked. Polling faster costs a write-locking
``BEGIN IMMEDIATE`` query each time (idle CPU 0.2 % at 1 s, 2.2 % at 0.1 s).

This transport keeps the 1 s poll as a ceiling, and ends the wait as soon as anyone writes
the broker file (``doorbell``: inotify on Linux, ``PRAGMA data_version`` elsewhere), so a
publish from any process is taken at once and an idle worker costs what it did at 1 s. A
missed wake costs at most the old 1 s, never a message: the poll itself is kombu's.

Every connection it opens also puts the file in WAL mode with ``synchronous=NORMAL``, as
``service.db`` does for the main database: kombu's default (a rollback journal, a full sync)
syncs a journal and the file on every publish and every delivery (about 12 ms each on
this machine's disk, 4 ms per fsync). A
power cut may then lose the last publishes, never a process crash; an execution whose
message is lost is in the main database's outbox, which the sweeper publishes again.

Every process uses it through Celery's ``broker_read_url``/``broker_write_url`` and
``broker_transport`` (see ``queue.celery_config``); ``broker_url`` keeps kombu's own
``sqla+`` form for whatever reads it as a plain setting (health checks, the publisher).
"""

from __future__ import annotations

from pathlib import Path
from queue import Empty
from time import monotonic, sleep
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

from service.executions.doorbell import Doorbell

# The full poll an idle consumer still makes without any wake (kombu's own default).
POLLING_INTERVAL_SECONDS = 1.0
TRANSPORT_PATH = "service.executions.sqlite_broker:Transport"
# While every prefetched message is still running (prefork only; the solo pool runs the task
# inside the poll), how often the consumer looks whether it may take one more.
BLOCKED_CHECK_SECONDS = 0.01


def _configure_connection(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class Channel(kombu_sqla.Channel):
    """kombu's channel, its SQLite engine configured like ``service.db``'s."""

    def _engine_from_config(self) -> Engine:
        engine: Engine = super()._engine_from_config()  # type: ignore[no-untyped-call]
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _configure_connection)
        return engine


class Transport(kombu_sqla.Transport):
    """kombu's SQLAlchemy transport whose idle wait ends when the broker file changes."""

    Channel = Channel
    polling_interval = POLLING_INTERVAL_SECONDS

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)  # type: ignore[no-untyped-call]
        self._doorbell = _doorbell_for(client.hostname or "")

    def drain_events(self, connection: Any, timeout: float | None = None, **_: Any) -> None:
        """kombu's loop (get, or wait and get again), with the wait cut short by a commit."""
        assert self.cycle is not None
        started = monotonic()
        while True:
            # Reset before polling: a commit during the poll then ends the wait at once.
            if self._doorbell is not None:
                self._doorbell.reset()
            try:
                self.cycle.get(self._deliver, timeout=timeout)  # type: ignore[no-untyped-call]
                return
            except Empty:
                waited = monotonic() - started
                if timeout is not None and waited >= timeout:
                    raise TimeoutError() from None
                wait = self.polling_interval
                if timeout is not None:
                    wait = min(wait, timeout - waited)
                self._wait(wait)

    def close_connection(self, connection: Any) -> None:
        if self._doorbell is not None:
            self._doorbell.close()
        super().close_connection(connection)  # type: ignore[no-untyped-call]

    def _wait(self, seconds: float) -> None:
        if self._doorbell is None:
            sleep(seconds)
            return
        if not self._can_consume():
            # A full prefetch window: a commit cannot be taken now, only a finished task
            # frees the window, so look again soon (kombu's own wait would be the ceiling).
            sleep(min(seconds, BLOCKED_CHECK_SECONDS))
            return
        self._doorbell.wait(seconds)

    def _can_consume(self) -> bool:
        """Whether a poll could take a message now (a full prefetch window cannot)."""
        return any(channel._consumers and channel.qos.can_consume() for channel in self.channels)


def _doorbell_for(url: str) -> Doorbell | None:
    """A doorbell on the broker's SQLite file; None for any other database (kombu's sleep)."""
    if not url.startswith("sqlite"):
        return None
    database = make_url(url).database
    if not database or database == ":memory:":
        return None
    return Doorbell(Path(database).resolve())
