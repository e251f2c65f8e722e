"""The components of ``draftgate dev`` as child processes: started, waited for, kept running.

Each child writes to ``<log_dir>/<name>.log``, so the terminal shows dev's own lines only.
Before the stack is ready, a child that dies stops dev (a port in use, a broken gateway
file: nothing a restart mends). Once it is ready, a child that dies (a killed worker, a
crash) is started again after a backoff, with a one-line notice; dev stops only when one
keeps dying (``RestartPolicy``).
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import typer

from service.text import inert

LOG_TAIL_LINES = 20
POLL_SECONDS = 0.5

# Starting the four components is CPU-bound (each imports its libraries): measured 9.5 s on
# 2 cores at load 1.5, i.e. 2.75 runnable processes per core. The default allows 30 s per
# process per core (about 8x that), at least 60 s, at most 600 s.
READY_SECONDS_PER_PROCESS_PER_CORE = 30.0
READY_TIMEOUT_MIN_SECONDS = 60.0
READY_TIMEOUT_MAX_SECONDS = 600.0
COMPONENTS = 4  # api, mcp, worker, beat


def default_ready_timeout(cpus: int, load: float) -> float:
    """Seconds dev waits for its servers by default on ``cpus`` cores at load ``load``,
    rounded up to 10 s: the machine's processes per core, ours included, times 30 s."""
    per_core = (max(load, 0.0) + COMPONENTS) / max(cpus, 1)
    seconds = math.ceil(READY_SECONDS_PER_PROCESS_PER_CORE * per_core / 10) * 10
    return min(READY_TIMEOUT_MAX_SECONDS, max(READY_TIMEOUT_MIN_SECONDS, seconds))


@dataclass(frozen=True)
class ReadyTimeout:
    """How long to wait for the servers to answer, and where that figure came from."""

    seconds: float
    basis: str

    @classmethod
    def of(cls, given: float | None) -> ReadyTimeout:
        if given is not None:
            return cls(given, "--ready-timeout")
        cpus = os.cpu_count() or 1
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average on this platform: judge by the cores alone
            load = 0.0
        return cls(
            default_ready_timeout(cpus, load),
            f"the default for {cpus} CPUs at load {load:.1f}; pass --ready-timeout to change it",
        )


@dataclass
class RestartPolicy:
    """When a component that died starts again: after 1, 2, 4, 8 … s (at most 30 s), counting
    its deaths within the last ``window_seconds``; the ``max_deaths``-th death in that window
    means it keeps dying, and dev stops instead."""

    max_deaths: int = 5
    window_seconds: float = 120.0
    first_delay_seconds: float = 1.0
    max_delay_seconds: float = 30.0
    deaths: dict[str, list[float]] = field(default_factory=dict)

    def delay_after_death(self, name: str, now: float) -> float | None:
        """Seconds to wait before starting ``name`` again, or None to give up on it."""
        recent = [at for at in self.deaths.get(name, []) if now - at < self.window_seconds]
        recent.append(now)
        self.deaths[name] = recent
        if len(recent) >= self.max_deaths:
            return None
        doubled = self.first_delay_seconds * 2.0 ** (len(recent) - 1)
        return min(self.max_delay_seconds, doubled)


def exit_description(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``: how a child ended, for people."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """The children of one ``draftgate dev``, by component name."""

    def __init__(
        self,
        commands: dict[str, list[str]],
        env: dict[str, str],
        log_dir: Path,
        *,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.commands = commands
        self.env = {"DRAFTGATE_LOG_FORMAT": "console", **env}  # for people, unless set
        self.log_dir = log_dir
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.restart_at: dict[str, float] = {}

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for name in self.commands:
            self._spawn(name)

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def _spawn(self, name: str) -> None:
        with self.log(name).open("ab") as log:  # the child keeps its own copy
            self.children[name] = subprocess.Popen(
                [sys.executable, "-m", "service.cli", *self.commands[name]],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(
        self, urls: dict[str, str], timeout: ReadyTimeout, stop_requested: threading.Event
    ) -> bool:
        """True once every URL answers; False if a stop was requested first. A child that
        dies meanwhile, or a URL still silent after the timeout, stops dev with its log."""
        deadline = self.clock() + timeout.seconds
        pending = dict(urls)
        while pending:
            for name, url in list(pending.items()):
                if stop_requested.is_set():
                    return False
                code = self.children[name].poll()
                if code is not None:
                    self._fatal(f"{name} stopped while starting ({exit_description(code)})", name)
                try:
                    with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - our own loopback URL
                        del pending[name]
                except OSError:
                    pass
            if pending and self.clock() > deadline:
                self._fatal(
                    f"not ready after {timeout.seconds:g} s ({timeout.basis}): "
                    + ", ".join(pending),
                    *pending,
                )
            stop_requested.wait(0.2)
        return True

    def watch(self, stop_requested: threading.Event) -> None:
        """Keep every component running until a stop is requested: restart one that died
        after the policy's backoff, or stop dev (exit 1) when it keeps dying."""
        while not stop_requested.wait(POLL_SECONDS):
            for name in self.commands:
                if stop_requested.is_set():
                    return
                self._tend(name)

    def _tend(self, name: str) -> None:
        now = self.clock()
        if name in self.restart_at:
            if now >= self.restart_at[name]:
                del self.restart_at[name]
                self._spawn(name)
            return
        code = self.children[name].poll()
        if code is None:
            return
        delay = self.policy.delay_after_death(name, now)
        deaths = len(self.policy.deaths[name])
        window = f"{self.policy.window_seconds:g} s"
        if delay is None:
            self._fatal(f"{name} keeps dying ({deaths} times within {window}); stopping", name)
        with self.log(name).open("a") as log:
            log.write(f"--- draftgate dev: {exit_description(code)}; restarting in {delay:g} s\n")
        self.restart_at[name] = now + delay
        typer.echo(
            f"{name} stopped ({exit_description(code)}); restarting it in {delay:g} s "
            f"(death {deaths} within {window}; dev stops at {self.policy.max_deaths}; "
            f"log: {self.log(name)})",
            err=True,
        )

    def _fatal(self, message: str, *names: str) -> NoReturn:
        typer.echo(message, err=True)
        for name in names:
            self.print_tail(name)
        raise typer.Exit(code=1)

    def print_tail(self, name: str) -> None:
        log = self.log(name)
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        typer.echo(f"{name}'s log ({log}) ends with:", err=True)
        for line in lines[-LOG_TAIL_LINES:]:
            typer.echo(inert(f"  {line}"), err=True)  # logs quote what agents sent

    def stop(self, *, grace: float = 0.0) -> None:
        """Wait up to ``grace`` seconds for the children to end by themselves (they got the
        terminal's Ctrl-C too), then SIGTERM the rest; SIGKILL what still runs after 10 s."""
        running = [child for child in self.children.values() if child.poll() is None]
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.poll() is None for c in running):
            time.sleep(0.05)
        for child in running:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in running:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
