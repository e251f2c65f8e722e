"""The whole stack for tests: database, broker, API, MCP server and a real Celery worker.

A ``StackHost`` lives for a test module (starting a worker costs seconds); each test gets
a ``Stack`` on the same processes with the database emptied and the demo seeded again,
and with the worker restarted if the previous test stopped or killed it.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from service.config import Settings
from service.runtime import Runtime, build_runtime
from tests.support.databases import fresh_demo
from tests.support.servers import serve
from tests.support.workers import WorkerProcess, start_worker


@dataclass
class Stack:
    settings: Settings
    runtime: Runtime
    demo: dict[str, Any]
    api_url: str
    mcp_url: str
    worker: WorkerProcess | None
    log_dir: Path


class StackHost:
    def __init__(self, settings: Settings) -> None:
        from mcp_adapter.server import create_http_app
        from service.api.app import create_app

        self.settings = settings
        self.log_dir = settings.state_dir.parent / "logs"
        self.runtime = build_runtime(settings)
        self._servers = ExitStack()
        self.api_url = self._servers.enter_context(serve(create_app(self.runtime)))
        self.mcp_url = self._servers.enter_context(serve(create_http_app(self.runtime))) + "/mcp"
        self.worker: WorkerProcess | None = None

    def fresh(self) -> Stack:
        """This host's stack for one more test: empty database, fresh demo, a live worker."""
        if not self.settings.resolved_database_url().startswith("sqlite"):
            self._purge_queue()
        demo = fresh_demo(self.runtime, api_url=self.api_url, mcp_url=self.mcp_url)
        if self.worker is None or not self.worker.alive:
            self.worker = start_worker(self.settings, self.log_dir / "worker.log")
        self.worker.mark()
        return Stack(
            self.settings, self.runtime, demo, self.api_url, self.mcp_url, self.worker, self.log_dir
        )

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()  # nothing of a finished module is worth a warm shutdown
        self._servers.close()
        self.runtime.engine.dispose()

    def _purge_queue(self) -> None:
        client = redis.Redis.from_url(self.settings.resolved_broker_url())
        try:
            client.delete(self.settings.broker_queue)
        finally:
            client.close()
