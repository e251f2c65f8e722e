"""Redis going away is an outage of the broker and of the shared rate-limit counters, never a
crash: found by the topology run, where every request of both doors answered 500 while
Redis (``DRAFTGATE_RATE_LIMIT_STORAGE_URL``, as compose.yaml sets it) was stopped.

While the shared store is down each process counts alone (the bound holds per replica);
once it answers again the shared counters are used. And a worker whose broker connection is
lost while it holds a message reconnects instead of exiting (Celery 5.7's clean-up error).
"""

from __future__ import annotations

import shutil

import pytest
from celery.utils.imports import symbol_by_name
from celery.worker.consumer import Consumer

from harness.servers import free_port
from reliability.services import PrivateRedis
from service.api.app import create_app
from service.config import Settings
from service.errors import DomainError
from service.executions.queue import celery_config
from service.ratelimit import Limits, RateLimiter
from service.runtime import build_runtime
from tests.support import services
from tests.support.api_client import in_process
from workers.consumer import BrokerLossTolerantConsumer


def limiter(url: str, per_address: str = "3/minute") -> RateLimiter:
    return RateLimiter(
        Limits(storage_url=url, per_address=per_address, per_token="", recorded_refusals="2/minute")
    )


def dead_redis() -> str:
    return f"redis://127.0.0.1:{free_port()}/1"  # nothing listens there


def test_with_the_shared_store_down_each_process_still_counts_and_refuses():
    limits = limiter(dead_redis())
    for _ in range(3):
        limits.check_address("203.0.113.9")  # within the bound: no crash, no refusal

    with pytest.raises(DomainError) as caught:
        limits.check_address("203.0.113.9")

    assert caught.value.code == "RATE_LIMITED"
    assert limits.refusal_to_record("auth:http:203.0.113.9") == 0  # the refusal budget too


def test_the_shared_counters_are_used_again_once_redis_answers(tmp_path):
    if shutil.which("redis-server") is None:
        services.unavailable("a private Redis", "redis-server not found")
    redis = PrivateRedis(tmp_path / "redis")  # of its own: this test starts it late
    limits = limiter(redis.url.removesuffix("/0") + "/1", per_address="2/minute")
    limits.check_address("198.51.100.4")  # Redis not started yet: counted in this process
    redis.start()
    try:
        other_replica = limiter(redis.url.removesuffix("/0") + "/1", per_address="2/minute")
        limits.check_address("198.51.100.4")  # now in Redis: 1 of 2
        other_replica.check_address("198.51.100.4")  # the other replica sees the same: 2 of 2
        with pytest.raises(DomainError):
            limits.check_address("198.51.100.4")
    finally:
        redis.kill()


def test_the_api_answers_normally_while_the_rate_limit_store_is_down(tmp_path, sqlite_url):
    settings = Settings(
        state_dir=tmp_path / "state", database_url=sqlite_url, rate_limit_storage_url=dead_redis()
    )
    runtime = build_runtime(settings)
    try:
        with in_process(create_app(runtime, publisher=lambda task, args: None)) as api:
            response = api.get("/v1/drafts", headers={"Authorization": "Bearer dg_unknown"})
    finally:
        runtime.engine.dispose()

    assert response.status_code == 401, response.text  # the token's answer, not a crash
    assert response.json()["code"] == "UNAUTHENTICATED"


def test_workers_run_the_consumer_that_survives_a_lost_broker_connection(tmp_path):
    config = celery_config(Settings(state_dir=tmp_path, broker_url="redis://127.0.0.1:1/0"))
    assert symbol_by_name(config["worker_consumer"]) is BrokerLossTolerantConsumer
    assert issubclass(BrokerLossTolerantConsumer, Consumer)


def test_the_clean_up_error_of_a_lost_connection_does_not_end_the_worker(monkeypatch):
    # What Celery 5.7 raises from its clean-up when Redis went away with a message unacked.
    def detached_transport(self, exc):
        self.connection = None  # Celery drops the connection before closing it
        raise AttributeError("'NoneType' object has no attribute 'hostname'")

    monkeypatch.setattr(Consumer, "on_connection_error_after_connected", detached_transport)
    consumer = object.__new__(BrokerLossTolerantConsumer)
    consumer.connection = object()

    consumer.on_connection_error_after_connected(ConnectionError("lost"))  # does not raise

    assert consumer.connection is None  # so the consumer reconnects


def test_other_errors_of_the_clean_up_still_surface(monkeypatch):
    def broken(self, exc):
        raise KeyError("something else")

    monkeypatch.setattr(Consumer, "on_connection_error_after_connected", broken)
    consumer = object.__new__(BrokerLossTolerantConsumer)

    with pytest.raises(KeyError):
        consumer.on_connection_error_after_connected(ConnectionError("lost"))
