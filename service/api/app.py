"""The FastAPI application factory."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service.api.console import install_console
from service.api.console.guard import ApiHeaders
from service.api.console.refusals import console_first
from service.api.errors import PROBLEM_JSON, install_error_handlers, problems, refuse_request
from service.api.observability import TraceContext, observe
from service.api.publisher import celery_publisher
from service.api.routes import admin, audit, drafts, executions, health, me, metrics
from service.api.routes.batches import router as batches_router
from service.api.routes.grants import router as grants_router
from service.api.routes.webhooks import router as webhooks_router
from service.api.routes.well_known import ResourceChallenge, protected_resource_router
from service.config import get_settings
from service.executions.outbox import Publisher
from service.guards import AddressLimit, BodyLimit
from service.runtime import Runtime, build_runtime


def operation_id(route: APIRoute) -> str:
    """Stable OpenAPI operation ids from the route names ("drafts.list" -> "drafts_list")."""
    return route.name.replace(".", "_")


def create_app(runtime: Runtime | None = None, *, publisher: Publisher | None = None) -> FastAPI:
    """The approver/auditor/admin API. Without a runtime, one is built from the environment."""
    app = FastAPI(
        title="draftgate",
        version="0.1.0",
        summary="Approve, execute and audit the writes AI agents propose.",
        generate_unique_id_function=operation_id,
        # No Swagger UI / ReDoc: FastAPI's pages load unpinned scripts from a CDN, on the
        # console's origin. The OpenAPI document stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    observe(app)  # logs name each request's trace and ids; spans when tracing
    runtime = runtime or build_runtime(get_settings())
    runtime.cursors.load()
    app.state.runtime = runtime
    app.state.publisher = publisher or celery_publisher(runtime.settings)
    install_error_handlers(app)
    install_console(app)  # /console/: pages, JSON for its scripts, static files, its guard
    # Starlette runs the last added outermost: the address limit first, then the body limit
    # (which refuses a /console request the console's way: its session, its error page).
    app.add_middleware(
        BodyLimit,
        max_bytes=runtime.settings.max_request_bytes,
        refuse=console_first(refuse_request),
    )
    app.add_middleware(AddressLimit, limiter=runtime.limiter, refuse=refuse_request)
    # Around the limits: every 401 of /v1, theirs included, points to the resource metadata.
    app.add_middleware(ResourceChallenge, resource=runtime.settings.api_public_url)
    app.add_middleware(TraceContext)  # every refusal names its trace
    app.add_middleware(ApiHeaders)  # outermost: no response outside /console runs script
    app.include_router(health.router)
    app.include_router(protected_resource_router(runtime.settings))
    app.include_router(drafts.router)
    app.include_router(executions.router)
    app.include_router(grants_router)
    app.include_router(batches_router)
    app.include_router(audit.router)
    app.include_router(metrics.router)
    app.include_router(webhooks_router)
    app.include_router(me.router)
    app.include_router(admin.router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, minus the 422 it documents but draftgate never sends, and minus
    ``null`` in parameters (a query string cannot say null; an optional one is left out).

    Request validation answers 400 problem+json (service.api.errors), which every
    route declares; FastAPI adds a 422 ``HTTPValidationError`` to each route anyway.
    """
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        routes=app.routes,
    )
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                _drop_null(parameter.get("schema", {}))
            responses = operation.get("responses", {})
            responses.pop("422", None)
            # Any request can meet the address limit or a database that went away.
            for status, problem in problems(429, 503).items():
                problem.pop("model")  # already a component: the entry is plain OpenAPI here
                responses.setdefault(str(status), problem)
            for status, response in responses.items():
                content = response.get("content", {})
                if status[0] in "45" and PROBLEM_JSON in content:
                    content.pop("application/json", None)  # problems are problem+json only
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


def _drop_null(schema: dict[str, Any]) -> None:
    """``anyOf: [X, {type: null}]`` becomes X, keeping the parameter's own title and notes."""
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if "anyOf" in schema and len(branches) == 1:
        del schema["anyOf"]
        schema.update(branches[0])
