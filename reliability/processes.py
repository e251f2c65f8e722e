"""The drill's own processes: real ``draftgate serve worker`` process groups, and the ledger
of everything started, which the watchdog reads to clean up if the drill itself is killed."""

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


class Worker:
    """One real worker (``draftgate serve worker``): a main process and its prefork pool,
    in a process group of their own so that a SIGKILL reaches all of them at once."""

    def __init__(
        self, settings: Settings, log: Path, ledger: Ledger, *, name: str, concurrency: int
    ) -> None:
        self.settings = settings
        self.log = log
        self.ledger = ledger
        self.name = name
        self.concurrency = concurrency
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start it and wait until it consumes from the queue."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._offset = self.log.stat().st_size if self.log.exists() else 0
        command = [
            sys.executable,
            "-m",
            "service.cli",
            "serve",
            "worker",
            "--concurrency",
            str(self.concurrency),
            "--loglevel",
            "INFO",
            "--hostname",
            f"{self.name}-{time.monotonic_ns()}@%h",
        ]
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                command,
                env=settings_env(self.settings),
                cwd=REPO_ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.ledger.add("pgids", self.process.pid)
        try:
            self._wait_ready()
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

    def stop(self) -> None:
        """Warm shutdown (SIGTERM to the main process, as ``docker stop``); SIGKILL if slow."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
        self.kill()

    def output(self) -> str:
        if not self.log.exists():
            return ""
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            return handle.read().decode(errors="replace")

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while " ready." not in self.output():
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.output()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker not ready:\n{self.output()[-4000:]}")
            time.sleep(0.05)


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
