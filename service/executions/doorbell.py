"""Waiting for a commit to a SQLite file by another process, without polling the database.

On Linux the kernel says when the file (or its WAL or journal) is written (inotify on its
directory, names filtered): an idle waiter costs nothing and wakes within a scheduler tick.
Elsewhere, ``PRAGMA data_version`` on a connection of its own is asked every
``FALLBACK_CHECK_SECONDS`` (it changes when any other connection commits).

Either way a wake only means "look now": a spurious one costs one poll, and a missed one
costs the caller's own ceiling, never a message.
"""

from __future__ import annotations

import ctypes
import os
import select
import sqlite3
import struct
import sys
from pathlib import Path
from time import monotonic, sleep

FALLBACK_CHECK_SECONDS = 0.01
_IN_MODIFY, _IN_CREATE, _IN_MOVED_TO = 0x2, 0x100, 0x80
_EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len


class Doorbell:
    """``wait(seconds)``: True as soon as the file was written since the last ``reset()``."""

    def __init__(self, database: Path) -> None:
        self._database = database
        self._names = {database.name, f"{database.name}-wal", f"{database.name}-journal"}
        self._fd: int | None = None
        self._connection: sqlite3.Connection | None = None
        self._version: int | None = None
        if sys.platform.startswith("linux"):
            self._fd = _inotify_watch(database.parent)

    @property
    def uses_inotify(self) -> bool:
        return self._fd is not None

    def reset(self) -> None:
        """Forget earlier writes: call before looking, so a write while looking still rings."""
        if self._fd is not None:
            self._read_events()
        else:
            self._changed()

    def wait(self, seconds: float) -> bool:
        deadline = monotonic() + seconds
        while True:
            left = deadline - monotonic()
            if self._fd is not None:
                if left <= 0 or not select.select([self._fd], [], [], left)[0]:
                    return False
                if self._read_events():
                    return True
            else:
                if self._changed():
                    return True
                if left <= 0:
                    return False
                sleep(min(FALLBACK_CHECK_SECONDS, left))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _read_events(self) -> bool:
        """Drain the pending events; True if one was about the database's files."""
        assert self._fd is not None
        ours = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return ours
            offset = 0
            while offset + _EVENT_HEADER.size <= len(data):
                _, _, _, length = _EVENT_HEADER.unpack_from(data, offset)
                start = offset + _EVENT_HEADER.size
                name = data[start : start + length].rstrip(b"\0").decode(errors="replace")
                ours = ours or name in self._names
                offset = start + length

    def _changed(self) -> bool:
        try:
            if self._connection is None:
                # Its own connection: data_version counts the commits of *other* connections
                # and compares only within one connection.
                self._connection = sqlite3.connect(
                    self._database, timeout=0.05, isolation_level=None, check_same_thread=False
                )
            version = int(self._connection.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self.close()
            return True  # unknown: let the caller look, it reports real errors
        changed = version != self._version
        self._version = version
        return changed


def _inotify_watch(directory: Path) -> int | None:
    """A non-blocking inotify descriptor watching writes in ``directory``, or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    mask = _IN_MODIFY | _IN_CREATE | _IN_MOVED_TO
    if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
        os.close(fd)
        return None
    return fd
