"""The worker's ``/metrics``: served by the main worker process for its whole pool.

Prefork children count into ``PROMETHEUS_MULTIPROC_DIR`` and the main process sums their
files on each scrape; a solo or threads pool runs its tasks in the main process and needs no
directory. Off unless ``DRAFTGATE_WORKER_METRICS_PORT`` is set (one port per worker process).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery import signals
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.multiprocess import mark_process_dead

from service import metrics
from service.config import get_settings
from service.errors import unauthenticated

logger = logging.getLogger(__name__)
StartResponse = Callable[[str, list[tuple[str, str]]], Any]

_servers: list[WSGIServer] = []


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not worth a log line."""


def metrics_app(token: str) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI app answering ``GET /metrics`` (with the bearer token, if one is configured)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"only /metrics is served here\n"]
        if not metrics.check_bearer(token, environ.get("HTTP_AUTHORIZATION")):
            error = unauthenticated("Scraping /metrics needs the bearer token.")
            start_response("401 Unauthorized", [("Content-Type", "application/json")])
            return [json.dumps(error.to_dict()).encode()]
        body = metrics.scrape()
        start_response("200 OK", [("Content-Type", metrics.CONTENT_TYPE)])
        return [body]

    return app


@signals.worker_init.connect  # type: ignore[untyped-decorator]
def _serve_metrics(sender: Any = None, **_: Any) -> None:
    settings = get_settings()
    if not settings.worker_metrics_port:
        return
    pool = str(getattr(sender, "pool_cls", "prefork"))
    if "prefork" in pool.lower() and not metrics.multiprocess():
        logger.warning(
            "worker metrics: PROMETHEUS_MULTIPROC_DIR is not set, so what the prefork pool "
            "processes count is not seen on /metrics (see docs/metrics.md)"
        )
    server = make_server(
        settings.worker_metrics_host,
        settings.worker_metrics_port,
        metrics_app(settings.metrics_token),
        server_class=ThreadingWSGIServer,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    _servers.append(server)
    logger.info(
        "worker metrics on http://%s:%s/metrics",
        settings.worker_metrics_host,
        settings.worker_metrics_port,
    )


@signals.worker_shutdown.connect  # type: ignore[untyped-decorator]
def _stop_metrics(**_: Any) -> None:
    while _servers:
        server = _servers.pop()
        server.shutdown()
        server.server_close()


@signals.worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _pool_process_exit(**_: Any) -> None:
    # Runs in the exiting pool process: its live gauges (if any) stop counting; its counters
    # and histograms stay summed, as they should.
    if metrics.multiprocess():
        mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
