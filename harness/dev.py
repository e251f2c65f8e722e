"""``draftgate dev`` run as a user runs it: the installed command, in a process group of its
own (so a Ctrl-C can reach the whole tree, as a terminal sends it), its terminal output in a
log file. The ports are free ones; the state dir is the caller's.

    with draftgate_dev(state_dir, log) as dev:     # waits until dev announces it is running
        manifest = dev.manifest()                   # <state-dir>/demo.json
        console = dev.banner("console")             # a value of the announcement
        code, seconds = dev.interrupt()             # Ctrl-C; else killed when the block ends
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.servers import free_port, healthy

DRAFTGATE = Path(sys.executable).parent / "draftgate"
START_TIMEOUT_SECONDS = 180  # a liveness bound on a shared machine, not a speed claim
STOP_TIMEOUT_SECONDS = 30
ANNOUNCED = "Press Ctrl-C to stop."


class DevRun:
    def __init__(self, state_dir: Path, log: Path, *args: str, **env: str) -> None:
        self.state_dir = state_dir
        self.log = log
        api_port, mcp_port = free_port(), free_port()
        self.api_url = f"http://127.0.0.1:{api_port}"
        self.mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
        self.argv = [
            str(DRAFTGATE),
            "dev",
            "--state-dir",
            str(state_dir),
            "--api-port",
            str(api_port),
            "--mcp-port",
            str(mcp_port),
            *args,
        ]
        # Only what the caller sets: nothing of this process's DRAFTGATE_* reaches dev.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGATE_")}
        self.env.update(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DevRun:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as output:  # every child inherits dev's stdout and stderr
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.log.parent,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None, "draftgate dev was never started"
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def manifest(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads((self.state_dir / "demo.json").read_text())
        return loaded

    def banner(self, label: str) -> str | None:
        """The first word after ``label`` on a line of dev's announcement (``console``,
        ``HTTP API``, ``manifest``...), or None."""
        found = re.search(rf"^\s*{re.escape(label)}\s+(\S+)", self.output(), re.MULTILINE)
        return found.group(1) if found else None

    def component_pid(self, name: str) -> int | None:
        """The pid of dev's child running ``serve <name>``, if one runs now."""
        for pid in children_of(self.pid):
            if f"\0serve\0{name}\0" in cmdline(pid):
                return pid
        return None

    def database(self) -> sqlite3.Connection:
        """dev's SQLite database, read-only (dev keeps writing it)."""
        uri = f"file:{self.state_dir / 'draftgate.db'}?mode=ro"
        return sqlite3.connect(uri, uri=True, timeout=30)

    def wait_for(
        self, condition: Callable[[], Any], what: str, seconds: float = START_TIMEOUT_SECONDS
    ) -> Any:
        """``condition()``'s first true value; fails if dev exits or ``seconds`` pass first."""
        assert self.process is not None, "draftgate dev was never started"
        deadline = time.monotonic() + seconds
        while not (value := condition()):
            if self.process.poll() is not None:
                raise AssertionError(f"draftgate dev exited early:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"draftgate dev: no {what} after {seconds} s:\n{self.output()}"
                )
            time.sleep(0.05)
        return value

    def wait_ready(self) -> None:
        """The manifest is written, both servers answer, and dev has announced it runs."""
        self.wait_for((self.state_dir / "demo.json").exists, "manifest")
        self.wait_for(lambda: healthy(self.api_url + "/healthz"), "API /healthz")
        self.wait_for(lambda: healthy(self.mcp_url.removesuffix("/mcp") + "/healthz"), "MCP")
        self.wait_for(lambda: ANNOUNCED in self.output(), "announcement")

    def interrupt(self, *, whole_group: bool = True) -> tuple[int, float]:
        """SIGINT as Ctrl-C sends it (to the group) or as ``kill -INT`` (to dev alone);
        returns dev's exit code and how long it took to stop."""
        assert self.process is not None, "draftgate dev was never started"
        started = time.monotonic()
        if whole_group:
            os.killpg(self.process.pid, signal.SIGINT)
        else:
            self.process.send_signal(signal.SIGINT)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired as exc:
            message = f"draftgate dev did not stop after SIGINT:\n{self.output()}"
            raise AssertionError(message) from exc
        return code, time.monotonic() - started

    def kill(self) -> None:
        """Take the whole tree down without ceremony (after a failed test)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)


def cmdline(pid: int) -> str:
    """A process's command line, NUL-separated and NUL-led ("" once it is gone)."""
    try:
        return "\0" + Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def children_of(pid: int) -> list[int]:
    """Live (not zombie) children of ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        state, parent = text[text.rindex(")") + 2 :].split()[:2]
        if int(parent) == pid and state != "Z":
            found.append(int(entry.name))
    return found


@contextmanager
def draftgate_dev(
    state_dir: Path, log: Path, *args: str, ready: bool = True, **env: str
) -> Iterator[DevRun]:
    """``draftgate dev`` started (and, unless ``ready=False``, ready); killed at the end
    if the block did not stop it."""
    dev = DevRun(state_dir, log, *args, **env).start()
    try:
        if ready:
            dev.wait_ready()
        yield dev
    finally:
        dev.kill()
