"""Cleans up after a drill that died without running its finally blocks (SIGKILL, OOM).

Started by the drill in a session of its own: ``python -m reliability.watchdog PID ROOT
LEDGER``. It exits quietly once ROOT is gone (the drill cleaned up itself); if the drill
(its parent, PID) disappears first, it kills every process group in the ledger, runs the
ledger's stop commands (the private PostgreSQL) and removes ROOT.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_SECONDS = 0.5


def main(argv: list[str]) -> int:
    parent, root, ledger = int(argv[0]), Path(argv[1]), Path(argv[2])
    while root.exists():
        if os.getppid() != parent:  # re-parented: the drill is gone
            clean_up(root, ledger)
            return 0
        time.sleep(POLL_SECONDS)
    return 0


def clean_up(root: Path, ledger: Path) -> None:
    try:
        state = json.loads(ledger.read_text())
    except (OSError, ValueError):
        state = {}
    for pgid in state.get("pgids", []):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
    for pid in state.get("pids", []):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for command in state.get("commands", []):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(command, timeout=60, check=False, capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
