"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from service.api.deps import RuntimeDep
from service.health import broker_reachable

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process serves requests")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the database and the broker answer")
def readyz(runtime: RuntimeDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with runtime.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # readiness reports any failure rather than raising it
        checks["database"] = f"unavailable: {type(exc).__name__}"
    checks["broker"] = broker_reachable(runtime.settings.resolved_broker_url())
    ready = all(value == "ok" for value in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status_code=200 if ready else 503,
    )
