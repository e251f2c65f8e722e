"""The baseline of B2 and B3: bare Celery doing the shop's refund write, nothing else.

One task, ``bench.bare_refund``: in one transaction, lock the order, look the refund up by its
idempotency key, insert it (what ``RefundAction.execute`` does to the shop's tables) — no
draft, no approvals, no signatures, no audit. Started as a worker by the benches::

    python -m celery -A bench.bare_celery worker ...

configured from the environment (``BARE_*``, set by ``bare_worker_env``), so the worker
process sees exactly the broker, result backend, database and queue the bench chose.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from celery import Celery
from sqlmodel import col, select

from service.db import make_engine, session_scope
from service.executions.sqlite_broker import TRANSPORT_PATH
from service.shop import repository
from service.shop.models import Order, Refund
from service.sql import utcnow

TASK = "bench.bare_refund"


def bare_config(
    *, broker_url: str, result_backend: str, queue: str, doorbell: bool = False
) -> dict[str, Any]:
    """Celery's defaults plus what a fair comparison needs (the same queue and ack policy)."""
    config: dict[str, Any] = {
        "broker_url": broker_url,
        "result_backend": result_backend,
        "task_default_queue": queue,
        "task_acks_late": True,
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "worker_hijack_root_logger": False,
        "broker_connection_retry_on_startup": True,
    }
    if broker_url.startswith("sqla+"):
        config["broker_transport_options"] = {"connect_args": {"timeout": 30}}
    if doorbell:  # the embedded broker's own transport (service.executions.sqlite_broker)
        config["broker_read_url"] = config["broker_write_url"] = broker_url.removeprefix("sqla+")
        config["broker_transport"] = TRANSPORT_PATH
    return config


def bare_worker_env(
    *, broker_url: str, result_backend: str, queue: str, database_url: str, doorbell: bool
) -> dict[str, str]:
    return {
        "BARE_BROKER_URL": broker_url,
        "BARE_RESULT_BACKEND": result_backend,
        "BARE_QUEUE": queue,
        "BARE_DATABASE_URL": database_url,
        "BARE_DOORBELL": "1" if doorbell else "",
    }


def _app_from_env() -> Celery:
    app = Celery("bench-bare", set_as_current=False)
    if os.environ.get("BARE_BROKER_URL"):
        app.conf.update(
            bare_config(
                broker_url=os.environ["BARE_BROKER_URL"],
                result_backend=os.environ["BARE_RESULT_BACKEND"],
                queue=os.environ["BARE_QUEUE"],
                doorbell=bool(os.environ.get("BARE_DOORBELL")),
            )
        )
    return app


app = _app_from_env()
_engines: dict[str, Any] = {}


def _engine() -> Any:
    url = os.environ["BARE_DATABASE_URL"]
    if url not in _engines:
        _engines[url] = make_engine(url)
    return _engines[url]


@app.task(name=TASK)  # type: ignore[untyped-decorator]
def bare_refund(tenant: str, order_number: str, amount_minor: int, idempotency_key: str) -> str:
    with session_scope(_engine()) as session:
        statement = (
            select(Order)
            .where(col(Order.tenant) == tenant, col(Order.order_number) == order_number)
            .with_for_update()
        )
        order = session.exec(statement).one()
        existing = repository.refund_by_key(session, idempotency_key)
        if existing is not None:
            return existing.id
        assert order.id is not None
        refund = Refund(
            id="re_" + secrets.token_hex(12),
            tenant=order.tenant,
            idempotency_key=idempotency_key,
            order_id=order.id,
            amount_minor=amount_minor,
            currency=order.currency,
            reason="damaged",
            created_at=utcnow(),
        )
        session.add(refund)
        session.flush()
        return refund.id
