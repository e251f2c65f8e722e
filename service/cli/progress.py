"""Progress on stderr for long CLI work (exports, offline verification), only at a terminal.

A script or a pipe gets none of it: the command's output stays exactly what it was."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)


def interactive() -> bool:
    """Whether someone watches stderr (a terminal)."""
    return Console(stderr=True).is_terminal


@contextmanager
def bytes_progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` after each ``n`` bytes; a bar when ``total`` is known, else a counter."""
    console = Console(stderr=True, force_terminal=interactive() or None)
    columns = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *([BarColumn()] if total else []),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, disable=not interactive(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda count: bar.advance(task, count)
