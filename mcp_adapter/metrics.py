"""The MCP door's metrics: one observation per tool call, and ``GET /metrics``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from service import metrics
from service.errors import ROUTE_NOT_FOUND, unauthenticated
from service.runtime import Runtime


@contextmanager
def observed(known: str | None) -> Iterator[None]:
    """Count and time the tool call in the block, by tool and outcome (the refusal's code).

    ``known``: the catalogue's name of the tool called; None (a name the agent made up) is
    counted as ``<unknown>``."""
    started = time.perf_counter()
    tool = known or metrics.UNKNOWN_TOOL
    try:
        yield
    except Exception as error:  # a cancelled call (the client left) is not counted
        metrics.tool_call_ended(tool, metrics.outcome_of(error), time.perf_counter() - started)
        raise
    metrics.tool_call_ended(tool, metrics.OK, time.perf_counter() - started)


def metrics_route(runtime: Runtime) -> Route:
    """``/metrics`` of this MCP server: its live metrics (the API reports the database's
    state, so a scrape here never touches the database).

    Only with DRAFTGATE_METRICS_TOKEN set: this port faces agents, and tool-call counts
    summed over every tenant would tell one tenant's agent how busy the others are."""
    token = runtime.settings.metrics_token

    async def scrape(request: Request) -> Response:
        if not token:
            error = ROUTE_NOT_FOUND(
                "The MCP server serves /metrics only when DRAFTGATE_METRICS_TOKEN is set."
            )
            return JSONResponse(error.to_dict(), status_code=404)
        if not metrics.check_bearer(token, request.headers.get("authorization")):
            error = unauthenticated(
                "Scraping /metrics needs the bearer token DRAFTGATE_METRICS_TOKEN."
            )
            return JSONResponse(error.to_dict(), status_code=401)
        body = await anyio.to_thread.run_sync(metrics.scrape)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    return Route("/metrics", scrape, methods=["GET"])
