"""Guards in front of both HTTP doors, written as plain ASGI (no framework): a client address
over its rate limit is turned away, and a request body is bounded before any parser sees it.

What a refusal looks like, and how it is audited, is the door's business: each door passes
a ``refuse`` callback that answers the request with the domain error.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from service.errors import DomainError, request_too_large
from service.ratelimit import RateLimiter
from service.validation import load_json

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Refuse = Callable[[Scope, Send, DomainError], Awaitable[None]]


class BodyLimit:
    """Refuse request bodies over ``max_bytes``: by Content-Length up front, or by reading a
    streamed body (buffered, at most ``max_bytes``) before the application sees any of it.

    With ``max_json_depth``, a body must also be JSON nested no deeper than that: a door
    whose framework parses bodies itself (the MCP SDK) then never meets a hostile one."""

    def __init__(
        self, app: App, *, max_bytes: int, refuse: Refuse, max_json_depth: int | None = None
    ) -> None:
        self._app = app
        self._max = max_bytes
        self._refuse = refuse
        self._max_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self._max:
            await self._refuse(scope, send, request_too_large(declared, self._max))
            return
        body, first = await self._read(receive)
        if body is None:
            await self._refuse(scope, send, request_too_large(declared, self._max))
            return
        if self._max_depth is not None and body:
            try:
                load_json(body, max_bytes=self._max, max_depth=self._max_depth)
            except DomainError as error:
                await self._refuse(scope, send, error)
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {**first, "body": body, "more_body": False}
            return await receive()  # after the body: disconnects and the like

        await self._app(scope, replay, send)

    async def _read(self, receive: Receive) -> tuple[bytes | None, Message]:
        """The whole body, or None once it passes the limit (the rest is never read)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), message  # the client left; let the app see it
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max:
                return None, message
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), message


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def client_address(scope: Scope) -> str:
    """The peer address of a request (behind a proxy: what the server was told it is)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class AddressLimit:
    """Refuse requests from a client address over its rate limit, before anything else runs."""

    def __init__(self, app: App, *, limiter: RateLimiter, refuse: Refuse) -> None:
        self._app = app
        self._limiter = limiter
        self._refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self._limiter.check_address(client_address(scope))
            except DomainError as error:
                await self._refuse(scope, send, error)
                return
        await self._app(scope, receive, send)


class Outage:
    """Answer a retryable 503 when the database went away mid-request and nothing inside
    turned that into a refusal (a framework's own code, e.g. the MCP SDK's token check, met
    it and its error middleware wrote a 500). Nothing is audited: the audit log lives in the
    database that is away. A 500 is held back until the application has finished, so it can
    be replaced; every other answer streams through untouched."""

    def __init__(self, app: App, *, unavailable: Callable[[BaseException], DomainError | None]):
        self._app = app
        self._unavailable = unavailable

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        held: list[Message] = []
        passed = False

        async def hold_a_crash(message: Message) -> None:
            nonlocal passed
            crashed = message["type"] == "http.response.start" and message["status"] == 500
            if crashed or held:  # the 500's start, then its body
                held.append(message)
            else:
                passed = passed or message["type"] == "http.response.start"
                await send(message)

        try:
            await self._app(scope, receive, hold_a_crash)
        except Exception as exc:
            error = self._unavailable(exc)
            if error is None or passed:
                await _flush(send, held)
                raise
            body = json.dumps(error.to_dict()).encode()
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await _flush(send, held)


async def _flush(send: Send, messages: list[Message]) -> None:
    for message in messages:
        await send(message)
