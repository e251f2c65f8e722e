"""The in-memory rate-limit counters: limits' semantics, without a thread per hit."""

from __future__ import annotations

import threading
import time

import pytest
from limits import parse, strategies

from service.ratelimit import InlineExpiryMemoryStorage


def test_no_thread_is_started_by_hits(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[threading.Thread] = []
    original = threading.Thread.start

    def counting_start(thread: threading.Thread) -> None:
        started.append(thread)
        original(thread)

    store = InlineExpiryMemoryStorage()
    monkeypatch.setattr(threading.Thread, "start", counting_start)
    limiter = strategies.FixedWindowRateLimiter(store)
    for _ in range(5):
        limiter.hit(parse("100/second"), "address", "203.0.113.7")
        time.sleep(0.015)  # past the 10 ms after which limits' own storage starts a new timer
    assert started == []


def test_counts_refuses_and_opens_the_next_window() -> None:
    limiter = strategies.FixedWindowRateLimiter(InlineExpiryMemoryStorage())
    item = parse("2/second")
    assert limiter.hit(item, "token", "t1")
    assert limiter.hit(item, "token", "t1")
    assert not limiter.hit(item, "token", "t1")
    assert limiter.hit(item, "token", "t2")  # keys are counted apart
    time.sleep(1.1)
    assert limiter.hit(item, "token", "t1")


def test_expired_keys_are_swept_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(InlineExpiryMemoryStorage, "SWEEP_SECONDS", 0.0)
    store = InlineExpiryMemoryStorage()
    limiter = strategies.FixedWindowRateLimiter(store)
    limiter.hit(parse("5/second"), "address", "198.51.100.1")
    assert len(store.storage) == 1
    time.sleep(1.1)
    limiter.hit(parse("5/minute"), "address", "198.51.100.2")  # a hit on another key sweeps
    assert list(store.storage) == [next(iter(store.storage))]
    assert all("198.51.100.1" not in key for key in store.storage)


def test_sweeping_while_other_threads_count_and_expire_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The library's sweep listed the keys, then indexed them: a key a concurrent read had
    # expired meanwhile raised KeyError in a request thread (an answer of 500).
    monkeypatch.setattr(InlineExpiryMemoryStorage, "SWEEP_SECONDS", 0.0)
    store = InlineExpiryMemoryStorage()
    errors: list[BaseException] = []
    deadline = time.monotonic() + 1.0

    def count(n: int) -> None:
        i = 0
        while time.monotonic() < deadline:
            try:
                store.incr(f"k{n}-{i % 200}", expiry=0.0005)  # expired almost at once
                store.get(f"k{(n + 1) % 2}-{i % 200}")
            except Exception as error:  # any of them is the failure
                errors.append(error)
            i += 1

    threads = [threading.Thread(target=count, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
