"""Pay what the first execution would pay, before the worker reports ready.

Without this the first execution after start took 0.6 to 1 s on PostgreSQL + Redis: the
runtime (registry, policies, engine) is built on first use, SQLAlchemy configures every
mapper and its dialect on the first query, and the pool opens its first connection then.
Running what a claim runs (the execution and its draft locked, the draft's approvals read,
by ids that do not exist) in a transaction that is rolled back does all of that, and
compiles those statements once, and changes nothing.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy.orm import configure_mappers
from sqlmodel import Session

from service.approvals import repository as approvals_repository
from service.drafts import repository as drafts_repository
from service.executions import repository
from service.runtime import Runtime

logger = logging.getLogger(__name__)

NO_SUCH_EXECUTION = "exe_" + "0" * 24
NO_SUCH_DRAFT = "dft_" + "0" * 32


def warm_up(runtime: Runtime) -> float:
    """Build what is built lazily, open a connection, run a claim's reads; the seconds taken.

    Best effort: a database that is down now is the first execution's problem (it retries),
    not a reason for the worker not to start."""
    started = time.perf_counter()
    try:
        configure_mappers()
        with Session(runtime.engine) as session:
            repository.get(session, NO_SUCH_EXECUTION, for_update=True)
            tenant = runtime.settings.default_tenant
            drafts_repository.get(session, tenant, NO_SUCH_DRAFT, for_update=True)
            approvals_repository.for_drafts(session, [NO_SUCH_DRAFT])
            session.rollback()
    except Exception as exc:  # warming is an optimisation: never fatal
        logger.warning("worker warm-up failed (the first execution will be slower): %s", exc)
    return time.perf_counter() - started
