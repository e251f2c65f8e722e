"""The ledger of everything a drill started (draftgate's processes come from harness/: the
drill hands this ledger to its ``Deployment``), which the watchdog reads to clean up if the
drill itself is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_SECONDS = 120


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
