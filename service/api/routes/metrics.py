"""``GET /metrics``: the Prometheus exposition of this API process, with the database's state.

Not in the OpenAPI document (it is for Prometheus, not for approvers). It reads, never writes:
a refused scrape is answered 401 and logged, not audited, so scraping cannot grow the log.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response

from service import metrics
from service.api.deps import RuntimeDep
from service.errors import unauthenticated

router = APIRouter()
logger = logging.getLogger(__name__)


@router.get("/metrics", include_in_schema=False, name="metrics")
def scrape(request: Request, runtime: RuntimeDep) -> Response:
    """Live metrics and the state gauges; a database that is down gives
    ``draftgate_database_up 0``, not an error."""
    settings = runtime.settings
    if not metrics.check_bearer(settings.metrics_token, request.headers.get("authorization")):
        logger.warning("metrics: a scrape without the metrics token was refused")
        raise unauthenticated("Scraping /metrics needs the bearer token DRAFTGATE_METRICS_TOKEN.")
    state = _state(request, runtime)
    return Response(metrics.scrape(state), media_type=metrics.CONTENT_TYPE)


def _state(request: Request, runtime: RuntimeDep) -> metrics.DatabaseCollector:
    # One collector per app (it keeps its Redis connection), made on the first scrape.
    state: metrics.DatabaseCollector | None = getattr(request.app.state, "metrics_state", None)
    if state is None:
        settings = runtime.settings
        state = metrics.database_collector(
            runtime.engine, settings.resolved_broker_url(), settings.broker_queue
        )
        request.app.state.metrics_state = state
    return state
