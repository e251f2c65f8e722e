"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from service.api.deps import RuntimeDep
from service.health import readiness

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    checks: dict[str, str]


@router.get("/healthz", summary="Liveness: the process serves requests", name="healthz")
def healthz() -> Liveness:
    return Liveness(status="ok")


@router.get(
    "/readyz",
    summary="Readiness: the database and the broker answer, the audit log is anchored",
    name="readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Not ready: a check failed."}},
)
def readyz(runtime: RuntimeDep) -> JSONResponse:
    checks = readiness(runtime.engine, runtime.settings)
    ready = all(value == "ok" for value in checks.values())
    body = Readiness(status="ready" if ready else "not ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
