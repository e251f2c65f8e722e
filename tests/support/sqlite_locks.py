"""SQLite's write lock, held and contended from threads of this process, for the tests of
the writers' queue and of reads that must not wait for it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text

from service.db import session_scope


def write(engine: Engine, label: str, entered: list[str], hold: float = 0.0) -> None:
    """One writer: take the write lock, note ``label`` once inside, hold it ``hold`` s."""
    with session_scope(engine) as session:
        session.execute(text("UPDATE shop_customers SET name = name"))  # takes the write lock
        entered.append(label)
        time.sleep(hold)


@contextmanager
def write_lock_held(engine: Engine) -> Iterator[None]:
    """Another thread holds the write lock (inside a unit of work) while the block runs."""
    holding, done = threading.Event(), threading.Event()

    def holder() -> None:
        with session_scope(engine) as session:
            session.execute(text("UPDATE shop_customers SET name = name"))
            holding.set()
            done.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(10), "the holder did not get the write lock"
    try:
        yield
    finally:
        done.set()
        thread.join(10)
