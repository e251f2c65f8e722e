"""The MCP server's readiness probe: what a load balancer asks before sending agents here."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.health import is_ready, readiness
from service.runtime import Runtime


def readyz_route(runtime: Runtime) -> Route:
    """``GET /readyz``: 200 when the database answers, else 503 naming what is wrong (the
    same body as the API's). Sync, so Starlette runs the blocking check in its thread pool."""

    def readyz(_: Request) -> JSONResponse:
        checks = readiness(runtime.engine, runtime.settings, "mcp")
        ready = is_ready(checks)
        body = {"status": "ready" if ready else "not ready", "checks": checks}
        return JSONResponse(body, status_code=200 if ready else 503)

    return Route("/readyz", readyz, methods=["GET"])
