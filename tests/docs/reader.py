"""A reader's shell on a fresh machine, for the tests that run the docs as written.

Only Python and git are installed: no uv, no virtual environment and no ``draftgate`` on
``PATH``, none of the project's or uv's variables set. The reader works in a directory of
their own whose ``./run`` is the checkout's (``run`` then works in that directory, as it
does in the checkout's root), so a test writes nothing into the checkout.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = ("uv", "uvx", "draftgate")
# What the project's tools set, and what would point a reader's uv elsewhere.
UNSET_PREFIXES = ("DRAFTGATE_", "UV_")
UNSET = ("VIRTUAL_ENV", "PYTHONHOME", "CONDA_PREFIX")


def fresh_machine_env(**extra: str) -> dict[str, str]:
    """This process's environment as a fresh machine's: ``PATH`` without any directory
    holding uv or draftgate (so without this virtual environment either), plus ``extra``."""
    venv_bin = Path(sys.executable).parent
    kept = [
        directory
        for directory in os.environ.get("PATH", "").split(os.pathsep)
        if directory
        and Path(directory).resolve() != venv_bin.resolve()
        and not any((Path(directory) / name).exists() for name in NOT_INSTALLED)
    ]
    path = os.pathsep.join(kept)
    for name in NOT_INSTALLED:
        assert shutil.which(name, path=path) is None, f"{name} is still on PATH"
    assert shutil.which("python3", path=path), "a fresh machine has Python"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(UNSET_PREFIXES) and key not in UNSET
    }
    return {**env, "PATH": path, **extra}


def reader_directory(directory: Path) -> Path:
    """``directory`` with a ``./run`` that is the checkout's ``run``."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "run"
    shim.write_text(f'#!/bin/sh\nexec "{ROOT / "run"}" "$@"\n')
    shim.chmod(0o755)
    return directory
