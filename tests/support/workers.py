"""A real Celery worker process (``draftgate serve worker``) for tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.config import Settings, child_environment

READY_TIMEOUT_SECONDS = 60


# The environment that makes a child process see exactly these settings.
settings_env = child_environment


class WorkerProcess:
    def __init__(self, process: subprocess.Popen[bytes], log: Path, *, offset: int = 0) -> None:
        self.process = process
        self.log = log
        self._offset = offset  # where this worker's part of a shared log file begins

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def mark(self) -> None:
        """From now on ``output()`` shows only what the worker logs after this moment."""
        self._offset = self.log.stat().st_size if self.log.exists() else 0

    def output(self) -> str:
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            return handle.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool children): no cleanup at all."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """Warm shutdown, signalled to the main process only (as `docker stop` does): a
        signal to the whole group would kill running tasks."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def celery_worker(
    settings: Settings, log: Path, *, concurrency: int = 1
) -> Iterator[WorkerProcess]:
    """Start ``draftgate serve worker`` with these settings and wait until it consumes."""
    worker = start_worker(settings, log, concurrency=concurrency)
    try:
        yield worker
    finally:
        worker.stop()


def start_worker(settings: Settings, log: Path, *, concurrency: int = 1) -> WorkerProcess:
    """A started worker, ready to consume; the caller stops (or kills) it."""
    log.parent.mkdir(parents=True, exist_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service.cli",
                "serve",
                "worker",
                "--concurrency",
                str(concurrency),
                "--loglevel",
                "INFO",
                "--hostname",
                f"test-{os.getpid()}-{time.monotonic_ns()}@%h",
            ],
            env=settings_env(settings),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so kill() reaches the pool too
        )
    worker = WorkerProcess(process, log, offset=offset)
    try:
        _wait_ready(worker)
    except BaseException:
        worker.kill()
        raise
    return worker


def _wait_ready(worker: WorkerProcess) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while " ready." not in worker.output():
        if worker.process.poll() is not None:
            raise RuntimeError(f"worker exited early:\n{worker.output()[-4000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker not ready:\n{worker.output()[-4000:]}")
        time.sleep(0.1)
