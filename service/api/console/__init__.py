"""The approvers' console, served by the API at /console/ (same process, same origin).

Server-rendered pages (Jinja2, autoescape) with a little JavaScript: htmx (vendored from npm,
pinned by frontend/package-lock.json, loaded with its SRI hash) and the console's own ES
modules in static/js/. Everything under /console is guarded by service.api.console.guard
(CSP, no framing, origin checks); sessions and CSRF by service.api.console.deps.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.api.console import api, audit_pages, credentials, grant_pages, pages, streams
from service.api.console.guard import ConsoleGuard
from service.api.console.refusals import refuse_console_request
from service.api.console.templating import STATIC_DIR


def install_console(app: FastAPI) -> None:
    """Add the console's routes, its static files and its guard to the API application."""
    app.include_router(pages.router)
    app.include_router(audit_pages.router)
    app.include_router(grant_pages.router)
    app.include_router(api.router)
    app.include_router(streams.router)
    app.include_router(credentials.router)
    app.mount("/console/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    app.add_middleware(ConsoleGuard, refuse=refuse_console_request)
