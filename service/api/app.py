"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from service.api.errors import install_error_handlers
from service.api.publisher import celery_publisher
from service.api.routes import audit, drafts, executions, health
from service.config import get_settings
from service.executions.outbox import Publisher
from service.runtime import Runtime, build_runtime


def create_app(runtime: Runtime | None = None, *, publisher: Publisher | None = None) -> FastAPI:
    """The approver/auditor/admin API. Without a runtime, one is built from the environment."""
    app = FastAPI(
        title="draftgate",
        version="0.1.0",
        summary="Approve, execute and audit the writes AI agents propose.",
    )
    runtime = runtime or build_runtime(get_settings())
    app.state.runtime = runtime
    app.state.publisher = publisher or celery_publisher(runtime.settings)
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(drafts.router)
    app.include_router(executions.router)
    app.include_router(audit.router)
    return app
