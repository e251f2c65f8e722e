"""The API's logs and traces: each request's trace bound, its ids named, a span per request."""

from __future__ import annotations

import re

from fastapi import Depends, FastAPI, Request

from service import telemetry
from service.drafts.schemas import DRAFT_ID_PATTERN
from service.executions.schemas import EXECUTION_ID_PATTERN
from service.logs import bind_ids
from service.telemetry import TraceContext

# Path parameters named on every log line of their request, when they are well-formed ids
# (anything else is the caller's text and stays out of the logs).
__all__ = ["TraceContext", "observe"]

LOGGED_IDS = {
    "draft_id": re.compile(DRAFT_ID_PATTERN),
    "execution_id": re.compile(EXECUTION_ID_PATTERN),
}


def observe(app: FastAPI) -> None:
    """Call right after creating the app, before any router is included; add ``TraceContext``
    as the outermost middleware."""
    app.router.dependencies.append(Depends(_name_ids))
    provider = telemetry.tracer_provider()
    if provider is None:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    # Outermost (it wraps the whole middleware stack): spans named after the route template.
    FastAPIInstrumentor.instrument_app(
        app,
        tracer_provider=provider,
        excluded_urls=telemetry.UNTRACED_PATHS,
        exclude_spans=telemetry.EXCLUDED_ASGI_SPANS,  # type: ignore[arg-type]
    )


async def _name_ids(request: Request) -> None:
    """Async, so the ids stay bound in the request's own context (for the access line too)."""
    bind_ids(
        **{
            name: value
            for name, pattern in LOGGED_IDS.items()
            if isinstance(value := request.path_params.get(name), str) and pattern.match(value)
        }
    )
