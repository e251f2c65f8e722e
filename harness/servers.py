"""Loopback servers: a free port, an ASGI app under uvicorn in a thread, waiting for a URL."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.types import ASGIApp

START_TIMEOUT_SECONDS = 30


def free_port() -> int:
    """A TCP port nothing listens on at 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def serve(app: ASGIApp, *, health_path: str = "/healthz", port: int | None = None) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1:<port, default a free one> until the block ends; yields the
    base URL once ``health_path`` answers 200. A server that must know its own URL up front
    (OAuth audiences, a WebAuthn origin) picks the port."""
    port = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="critical", ws="none", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + health_path, START_TIMEOUT_SECONDS, alive=thread.is_alive, ok=200)
    except RuntimeError:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_SECONDS)
        raise
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT_SECONDS)


def healthy(url: str) -> bool:
    """True when ``url`` answers 200 right now."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def wait_http(
    url: str,
    timeout: float = START_TIMEOUT_SECONDS,
    *,
    alive: Callable[[], bool] | None = None,
    ok: int | None = None,
) -> None:
    """Poll ``url`` until it answers ``ok`` (default: any status below 500); ``alive()``
    returning False (the server's process or thread is gone) fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status = httpx.get(url, timeout=1).status_code
            if (status == ok) if ok is not None else status < 500:
                return
        except httpx.TransportError:
            pass
        if alive is not None and not alive():
            raise RuntimeError(f"the server of {url} is gone")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout} s")
        time.sleep(0.05)
