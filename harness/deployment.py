"""``Deployment``: one private draftgate deployment, composed of the parts it is asked for.

    with Deployment(settings) as deployment:        # a runtime on settings' database
        deployment.seed()                           # the demo tenant (or prepare(): migrate too)
        api = deployment.serve_api()                # uvicorn in a thread of this process
        mcp = deployment.serve_mcp(in_process=False)  # or ``draftgate serve mcp``, a process
        worker = deployment.start_worker()          # a real Celery worker process
        beat = deployment.start_beat()

Which backend (SQLite + kombu's SQLite broker, or PostgreSQL + Redis), a gateway file or an
OpenID issuer: all of it is in the settings (harness/settings.py builds them). Everything
started is stopped by ``close()``, the processes all signalled at once, then each awaited.
A start is noted on the log line ``harness: started ...`` (logger ``harness``) and, when
``DRAFTGATE_HARNESS_STARTS`` names a file, as a JSON line there (who started what for
which test), so that stack starts can be counted.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from harness import databases
from harness.processes import (
    BeatProcess,
    ChildProcess,
    HttpProcess,
    Ledger,
    WorkerProcess,
)
from harness.servers import serve
from service.config import Settings
from service.executions.outbox import Publisher
from service.runtime import Runtime, build_runtime

logger = logging.getLogger("harness")
STARTS_FILE = "DRAFTGATE_HARNESS_STARTS"
P = TypeVar("P", bound=ChildProcess)


class Deployment:
    """A private deployment: its settings, a runtime of this process on its database, and
    everything started for it so far (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        runtime: Runtime | None = None,
        log_dir: Path | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir or settings.state_dir.parent / "logs"
        self.ledger = ledger
        self.processes: list[ChildProcess] = []
        self.api_url: str | None = None
        self.mcp_url: str | None = None
        self._given_runtime = runtime
        self._closing = ExitStack()

    def __enter__(self) -> Deployment:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @cached_property
    def runtime(self) -> Runtime:
        """The runtime of this process on the deployment's database (built on first use)."""
        if self._given_runtime is not None:
            return self._given_runtime
        runtime = build_runtime(self.settings)
        self._closing.callback(runtime.engine.dispose)
        return runtime

    # --- the database --------------------------------------------------------------------

    def prepare(self, *, api_url: str = "", mcp_url: str = "") -> dict[str, Any]:
        """What ``migrate`` and ``draftgate dev`` do first: migrate the database, create the
        checkpoint key the workers sign with, seed the demo; returns the manifest."""
        from service.audit.checkpoints import ensure_key
        from service.migrate import upgrade

        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        upgrade(self.settings.resolved_database_url())
        ensure_key(self.settings.resolved_checkpoint_key_file())
        return self.seed(api_url=api_url, mcp_url=mcp_url)

    def seed(self, *, api_url: str = "", mcp_url: str = "") -> dict[str, Any]:
        """Seed the demo tenant (its URLs: the servers started so far unless given)."""
        return databases.seed(
            self.runtime,
            api_url=api_url or self.api_url or databases.NOWHERE["api_url"],
            mcp_url=mcp_url or self.mcp_url or databases.NOWHERE["mcp_url"],
        )

    # --- the HTTP doors ------------------------------------------------------------------

    def serve_api(
        self,
        *,
        in_process: bool = True,
        port: int | None = None,
        publisher: Publisher | None = None,
        wrap: Any = None,
    ) -> str:
        """The HTTP API: ``create_app`` under uvicorn in a thread (``publisher`` replaces the
        Celery publisher, ``wrap`` wraps the ASGI app), or ``draftgate serve api``."""
        if not in_process:
            if publisher is not None or wrap is not None:
                raise ValueError("an API process has its own publisher and app")
            url = self.api_url = self.start_http("api", port=port).url
            return url
        from service.api.app import create_app

        app = create_app(self.runtime, **({"publisher": publisher} if publisher else {}))
        url = self.api_url = self._closing.enter_context(
            serve(wrap(app) if wrap else app, port=port)
        )
        self._started("api")
        return url

    def serve_mcp(self, *, in_process: bool = True, port: int | None = None) -> str:
        """The MCP server over streamable HTTP; returns its endpoint (``.../mcp``)."""
        if not in_process:
            url = self.mcp_url = self.start_http("mcp", port=port).mcp_url
            return url
        from mcp_adapter.server import create_http_app

        base = self._closing.enter_context(serve(create_http_app(self.runtime), port=port))
        url = self.mcp_url = base + "/mcp"
        self._started("mcp")
        return url

    def start_http(
        self,
        component: str,
        *args: str,
        port: int | None = None,
        log: Path | None = None,
        wait: bool = True,
        **env: str,
    ) -> HttpProcess:
        """``draftgate serve api|mcp`` as a process of its own; ``wait=False`` returns at
        once (then call ``wait_ready()``: several processes start side by side)."""
        log = log or self.log_dir / f"{component}-{len(self.processes)}.log"
        process = HttpProcess(
            component, self.settings, log, *args, port=port, env=env, ledger=self.ledger
        )
        return self._launch(process, wait)

    # --- the processes behind them -------------------------------------------------------

    def start_worker(
        self,
        *args: str,
        concurrency: int = 1,
        name: str = "worker",
        log: Path | None = None,
        wait: bool = True,
    ) -> WorkerProcess:
        """A real Celery worker (``draftgate serve worker``), ready to consume."""
        worker = WorkerProcess(
            self.settings,
            log or self.log_dir / f"{name}.log",
            *args,
            name=name,
            concurrency=concurrency,
            ledger=self.ledger,
        )
        return self._launch(worker, wait)

    def start_beat(self, *, wait: bool = True) -> BeatProcess:
        beat = BeatProcess(self.settings, self.log_dir / "beat.log", ledger=self.ledger)
        return self._launch(beat, wait)

    def close(self, *, kill: bool = False) -> None:
        """Stop every process (all signalled at once, then each awaited or killed; ``kill``:
        SIGKILL at once, nothing of a finished run is worth a warm shutdown), then the
        servers in this process and the runtime."""
        for process in self.processes:
            if kill:
                process.kill()
            else:
                process.terminate()
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        self._closing.close()

    def _launch(self, process: P, wait: bool) -> P:
        self.processes.append(process)
        process.launch()
        self._started(process.name, where="process")
        if wait:
            process.wait_ready()
        return process

    def _started(self, component: str, *, where: str = "thread") -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "")
        logger.info("harness: started %s (%s) for %s", component, where, test or "-")
        path = os.environ.get(STARTS_FILE)
        if path:
            line = {"pid": os.getpid(), "component": component, "where": where, "test": test}
            with open(path, "a", encoding="utf-8") as sink:
                sink.write(json.dumps(line) + "\n")
