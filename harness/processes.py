"""draftgate's components as real processes: ``python -m service.cli serve <component>``.

Each runs in a process group of its own (a worker's prefork pool included), so that a
SIGKILL reaches all of it at once, with its output in a log file that is read to know
when it is ready. A ``ledger`` (the drill's, see reliability/processes.py) is told of every
group started and ended, so that a watchdog can clean up after a killed parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from harness.servers import free_port, healthy
from harness.settings import settings_env
from service.config import Settings

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_SECONDS = 120
STOP_TIMEOUT_SECONDS = 30


class Ledger(Protocol):
    def add(self, kind: str, value: Any) -> None: ...
    def remove(self, kind: str, value: Any) -> None: ...


def serve_command(component: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", "serve", component, *args]


class ChildProcess:
    """One process (and its group) with its log; ``ready()`` says when it does its job."""

    ready_marker = ""  # a line of its log that says it is ready (HTTP servers: /healthz)

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        *,
        ledger: Ledger | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.log = log
        self.ledger = ledger
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0  # where this run's part of a shared log file begins

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} was never started"
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def command(self) -> list[str]:
        return self.argv

    def ready(self) -> bool:
        return self.ready_marker in self.output()

    def start(self, timeout: float = READY_TIMEOUT_SECONDS) -> ChildProcess:
        """Start it and wait until it is ready."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Start it without waiting (several processes then start side by side)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.command(),
                env=self.env,
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if self.ledger is not None:
            self.ledger.add("pgids", self.process.pid)

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Wait until ``ready()``; kills it and raises if it exits or the time runs out."""
        assert self.process is not None, f"{self.name} was never started"
        deadline = time.monotonic() + timeout
        try:
            while not self.ready():
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.name} exited early:\n{self.output()[-4000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} not ready:\n{self.output()[-4000:]}")
                time.sleep(0.05)
        except BaseException:
            self.kill()
            raise

    def mark(self) -> None:
        """From now on ``output()`` shows only what it logs after this moment."""
        self._offset = self.log.stat().st_size if self.log.exists() else 0

    def output(self) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            return handle.read().decode(errors="replace")

    def terminate(self) -> None:
        """SIGTERM to the main process only, as ``docker stop`` sends it (a signal to the
        whole group would kill a worker's running tasks); does not wait."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def stop(self, grace: float = STOP_TIMEOUT_SECONDS) -> int | None:
        """Warm shutdown (``terminate()``), then SIGKILL whatever is left of the group.
        Returns the exit status of the warm shutdown, None when it had to be killed."""
        if self.process is None:
            return None
        status = None
        self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            status = self.process.wait(timeout=grace)
        self.kill()
        return status

    def kill(self) -> None:
        """SIGKILL the whole group (main process and pool children): no cleanup at all."""
        process = self.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
        if self.ledger is not None:
            self.ledger.remove("pgids", process.pid)


class HttpProcess(ChildProcess):
    """``draftgate serve api|mcp`` on a loopback port: ready once /healthz answers."""

    def __init__(
        self,
        component: str,
        settings: Settings,
        log: Path,
        *args: str,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.port = port or free_port()
        extra = dict(env or {})
        if component == "mcp":  # the audience of its tokens, the URL its metadata names
            extra.setdefault("DRAFTGATE_MCP_PUBLIC_URL", f"{self.url}/mcp")
        argv = serve_command(component, *args, "--host", "127.0.0.1", "--port", str(self.port))
        super().__init__(
            f"{component}:{self.port}", argv, settings_env(settings, **extra), log, ledger=ledger
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    base_url = url

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def ready(self) -> bool:
        return healthy(self.url + "/healthz")


class WorkerProcess(ChildProcess):
    """``draftgate serve worker``: ready once Celery says it consumes from the queue. Each
    start is a new Celery node (a node name of its own), as in a rollout."""

    ready_marker = " ready."

    def __init__(
        self,
        settings: Settings,
        log: Path,
        *args: str,
        name: str = "worker",
        concurrency: int = 1,
        env: Mapping[str, str] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.settings = settings
        self.concurrency = concurrency
        argv = serve_command("worker", "--concurrency", str(concurrency), "--loglevel", "INFO")
        super().__init__(
            name, [*argv, *args], settings_env(settings, **(env or {})), log, ledger=ledger
        )

    def command(self) -> list[str]:
        node = f"{self.name}-{os.getpid()}-{time.monotonic_ns()}@%h"
        return [*self.argv, "--hostname", node]


class BeatProcess(ChildProcess):
    """``draftgate serve beat``: the scheduler of the sweeper and the audit checkpoints."""

    ready_marker = "beat: Starting..."

    def __init__(self, settings: Settings, log: Path, *, ledger: Ledger | None = None) -> None:
        argv = serve_command("beat", "--loglevel", "INFO")
        super().__init__("beat", argv, settings_env(settings), log, ledger=ledger)


def start_worker(settings: Settings, log: Path, *, concurrency: int = 1) -> WorkerProcess:
    """A started worker, ready to consume; the caller stops (or kills) it."""
    worker = WorkerProcess(settings, log, concurrency=concurrency)
    worker.start()
    return worker


@contextmanager
def celery_worker(
    settings: Settings, log: Path, *, concurrency: int = 1
) -> Iterator[WorkerProcess]:
    """``draftgate serve worker`` with these settings, ready; stopped when the block ends."""
    worker = start_worker(settings, log, concurrency=concurrency)
    try:
        yield worker
    finally:
        worker.stop()
