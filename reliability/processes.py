"""The drill's own processes: real ``draftgate serve`` process groups (worker, beat, API, MCP
server), and the ledger of everything started, which the watchdog reads to clean up if the
drill itself is killed."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from reliability.services import free_port
from service.config import Settings, child_environment

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_SECONDS = 120


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process see exactly these settings, its output
    unbuffered (the drill reads the logs while the process runs)."""
    return {**child_environment(settings), "PYTHONUNBUFFERED": "1"}


class Ledger:
    """What the drill started and how to stop it, in a file the watchdog can read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._state: dict[str, Any] = {"pgids": [], "pids": [], "commands": []}
        self._write()

    def add(self, kind: str, value: Any) -> None:
        if value not in self._state[kind]:
            self._state[kind].append(value)
            self._write()

    def remove(self, kind: str, value: Any) -> None:
        if value in self._state[kind]:
            self._state[kind].remove(value)
            self._write()

    def _write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self._state))
        temporary.replace(self.path)


class Component:
    """One real draftgate process (``draftgate serve <args>``): a main process (and, for a
    worker, its prefork pool) in a process group of its own, so that a SIGKILL reaches all
    of them at once. ``start()`` returns once ``ready()`` says it does its job."""

    def __init__(
        self,
        settings: Settings,
        log: Path,
        ledger: Ledger,
        *,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.log = log
        self.ledger = ledger
        self.name = name
        self.args = args
        self.env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Start it and wait until it is ready."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start it without waiting (several processes then start side by side)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        command = [sys.executable, "-m", "service.cli", "serve", *self.args]
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                command,
                env={**settings_env(self.settings), **self.env},
                cwd=REPO_ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.ledger.add("pgids", self.process.pid)

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Wait until ``ready()``; kills it and raises if it exits or the time runs out."""
        assert self.process is not None
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

    def kill(self) -> None:
        """SIGKILL the whole group (main process and pool children): no cleanup at all."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        else:  # the main process is gone; its pool children may not be
            _killpg_quietly(process.pid)
        process.wait(timeout=30)
        self.ledger.remove("pgids", process.pid)

    def stop(self) -> int | None:
        """Warm shutdown (SIGTERM to the main process, as ``docker stop``); SIGKILL if slow.
        Returns the exit status of the warm shutdown, None when it had to be killed."""
        process = self.process
        if process is None:
            return None
        status = None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                status = process.wait(timeout=30)
        self.kill()
        return status

    def output(self) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            return handle.read().decode(errors="replace")


class Worker(Component):
    """``draftgate serve worker``: ready once Celery says it consumes from the queue."""

    def __init__(
        self, settings: Settings, log: Path, ledger: Ledger, *, name: str, concurrency: int
    ) -> None:
        super().__init__(settings, log, ledger, name=name, args=[])
        self.concurrency = concurrency

    def launch(self) -> None:
        # A node name of its own per start: a restarted worker is a new node, as in a rollout.
        self.args = [
            "worker",
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "INFO",
            "--hostname",
            f"{self.name}-{time.monotonic_ns()}@%h",
        ]
        super().launch()

    def ready(self) -> bool:
        return " ready." in self.output()


class BeatProcess(Component):
    """``draftgate serve beat``: the scheduler of the sweeper and the audit checkpoints."""

    def __init__(self, settings: Settings, log: Path, ledger: Ledger) -> None:
        super().__init__(settings, log, ledger, name="beat", args=["beat", "--loglevel", "INFO"])

    def ready(self) -> bool:
        return "beat: Starting..." in self.output()


class Server(Component):
    """``draftgate serve api|mcp`` on a free loopback port: ready once /healthz answers."""

    def __init__(
        self,
        settings: Settings,
        log: Path,
        ledger: Ledger,
        *,
        component: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        args = [component, "--host", "127.0.0.1", "--port", str(self.port)]
        super().__init__(settings, log, ledger, name=f"{component}:{self.port}", args=args, env=env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            return httpx.get(self.url + "/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False


def _killpg_quietly(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def start_watchdog(root: Path, ledger: Ledger) -> subprocess.Popen[bytes]:
    """A small process that cleans up if this one dies without running its finally blocks."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reliability.watchdog",
            str(os.getpid()),
            str(root),
            str(ledger.path),
        ],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
