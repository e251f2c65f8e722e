"""Connections to upstream MCP servers, for the synchronous core and worker.

One pool per process: a daemon thread runs an asyncio loop, and each upstream gets one
long-lived ``mcp.Client`` (stdio subprocess or streamable HTTP), opened on first use and
opened again after it broke. A connection lives in a task of its own (the SDK's transports
must be closed by the task that opened them); calls are scheduled onto the loop and waited
for with the upstream's timeout. A forked child (Celery's prefork pool) starts its own.

``notifications/tools/list_changed`` (and, on 2026-07-28 connections, a ``tools`` listen
event) makes the pool re-read that upstream's catalogue and tell its listeners.

This is the gateway's only module that imports the MCP SDK (see ``upstream.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Awaitable
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TextIO, TypeVar, cast

from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, RequestParamsMeta, TextContent, ToolListChangedNotification

from service.gateway.upstream import (
    ChangeListener,
    UpstreamFailure,
    UpstreamResult,
    UpstreamSpec,
    UpstreamTool,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")
# JSON-RPC errors that say the request itself is wrong: trying again cannot help.
_FINAL_CODES = frozenset({-32600, -32601, -32602})
MAX_PAGES = 50


@dataclass(eq=False)
class _Connection:
    spec: UpstreamSpec
    client: Client | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    failure: BaseException | None = None
    task: asyncio.Task[None] | None = None


class McpUpstreams:
    """The ``Upstreams`` of this process (see ``pool()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: dict[tuple[object, ...], _Connection] = {}
        self._catalogues: dict[tuple[object, ...], list[UpstreamTool]] = {}
        self._listeners: list[ChangeListener] = []

    # -- the sync API ------------------------------------------------------------------

    def tools(self, spec: UpstreamSpec, *, refresh: bool = False) -> list[UpstreamTool]:
        if not refresh and _key(spec) in self._catalogues:
            return self._catalogues[_key(spec)]
        return self._run(spec, self._list_tools(spec))

    def call_tool(
        self,
        spec: UpstreamSpec,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any] | None = None,
    ) -> UpstreamResult:
        return self._run(spec, self._call(spec, name, arguments, meta))

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def close(self, timeout: float = 5.0) -> None:
        """Close every connection and wait for it (stdio children exit); the pool opens new
        ones if it is used again."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        future = asyncio.run_coroutine_threadsafe(self._close_all(), loop)
        try:
            future.result(timeout=timeout)
        except FutureTimeout:
            logger.warning("upstream connections did not close within %s s", timeout)

    async def _close_all(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.closed.set()
        tasks = [c.task for c in connections if c.task is not None]
        if tasks:
            await asyncio.wait(tasks)

    # -- plumbing ----------------------------------------------------------------------

    def _run(self, spec: UpstreamSpec, work: Awaitable[T]) -> T:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(work), loop)
        # The SDK has its own read timeout; this one also bounds connecting.
        try:
            return future.result(timeout=spec.timeout_seconds + 1)
        except FutureTimeout:
            future.cancel()
            raise UpstreamFailure(
                f"no answer within {spec.timeout_seconds:g} s", transient=True
            ) from None

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self._loop.is_running():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="gateway-upstreams", daemon=True
                )
                thread.start()
                self._loop = loop
                self._connections = {}
            return self._loop

    async def _connected(self, spec: UpstreamSpec) -> Client:
        connection = self._connections.get(_key(spec))
        if connection is None or connection.closed.is_set() or connection.failure is not None:
            connection = _Connection(spec)
            self._connections[_key(spec)] = connection
            connection.task = asyncio.get_running_loop().create_task(self._keep(connection))
        try:
            await asyncio.wait_for(connection.ready.wait(), timeout=spec.timeout_seconds)
        except TimeoutError:
            connection.closed.set()
            raise UpstreamFailure(
                f"could not connect within {spec.timeout_seconds:g} s", transient=True
            ) from None
        if connection.client is None:
            raise UpstreamFailure(
                f"could not connect: {_describe(connection.failure)}", transient=True
            )
        return connection.client

    async def _keep(self, connection: _Connection) -> None:
        """Open the connection, hold it until it is closed or breaks, then forget it."""
        spec = connection.spec
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(_client(spec, self._notified(spec), stack))
                connection.client = client
                connection.ready.set()
                listen = asyncio.get_running_loop().create_task(self._listen(spec, client))
                await connection.closed.wait()
                listen.cancel()
        except BaseException as exc:  # the connection broke: the next call opens a new one
            connection.failure = exc
            if not isinstance(exc, asyncio.CancelledError):
                logger.warning("upstream %s: connection ended: %s", spec.namespace, _describe(exc))
        finally:
            connection.client = None
            connection.closed.set()
            connection.ready.set()

    def _notified(self, spec: UpstreamSpec) -> MessageHandlerFnT:
        async def handle(message: IncomingMessage) -> None:
            if isinstance(message, ToolListChangedNotification):
                asyncio.get_running_loop().create_task(self._reread(spec))
            elif isinstance(message, Exception):
                logger.warning("upstream %s: %s", spec.namespace, _describe(message))

        return handle

    async def _listen(self, spec: UpstreamSpec, client: Client) -> None:
        """On 2026-07-28 connections the change arrives as a listen event instead."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _ in subscription:
                    await self._reread(spec)
        except asyncio.CancelledError:
            raise
        except Exception:  # no listen on this connection (older protocol): notifications
            return

    async def _reread(self, spec: UpstreamSpec) -> None:
        try:
            await self._list_tools(spec)
        except Exception as exc:
            logger.warning("upstream %s: catalogue re-read failed: %s", spec.namespace, exc)

    async def _list_tools(self, spec: UpstreamSpec) -> list[UpstreamTool]:
        client = await self._connected(spec)
        tools: list[UpstreamTool] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += [
                    UpstreamTool(
                        name=tool.name,
                        description=tool.description or "",
                        input_schema=dict(tool.input_schema),
                        title=tool.title,
                        read_only_hint=tool.annotations.read_only_hint
                        if tool.annotations is not None
                        else None,
                        destructive_hint=tool.annotations.destructive_hint
                        if tool.annotations is not None
                        else None,
                    )
                    for tool in page.tools
                ]
                cursor = page.next_cursor
                if cursor is None:
                    break
        except MCPError as exc:
            raise UpstreamFailure(
                f"tools/list failed: {exc.error.message}", transient=exc.code not in _FINAL_CODES
            ) from None
        except UpstreamFailure:
            raise
        except Exception as exc:
            self._drop(spec)
            raise UpstreamFailure(f"tools/list failed: {_describe(exc)}", transient=True) from None
        self._catalogues[_key(spec)] = tools
        for listener in list(self._listeners):
            try:
                listener(spec.namespace, tools)
            except Exception:  # one listener's bug must not stop the others
                logger.exception("gateway catalogue listener failed")
        return tools

    async def _call(
        self, spec: UpstreamSpec, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> UpstreamResult:
        client = await self._connected(spec)
        try:
            result = await client.call_tool(
                name,
                arguments,
                read_timeout_seconds=spec.timeout_seconds,
                meta=cast("RequestParamsMeta", meta) if meta is not None else None,
            )
        except MCPError as exc:
            raise UpstreamFailure(
                exc.error.message or f"error {exc.code}", transient=exc.code not in _FINAL_CODES
            ) from None
        except Exception as exc:  # a broken transport or a read timeout: nothing answered
            self._drop(spec)
            raise UpstreamFailure(_describe(exc), transient=True) from None
        return _result(result)

    def _drop(self, spec: UpstreamSpec) -> None:
        connection = self._connections.pop(_key(spec), None)
        if connection is not None:
            connection.closed.set()


def _key(spec: UpstreamSpec) -> tuple[object, ...]:
    """One connection per upstream as declared (two files may reuse a namespace)."""
    return (spec.namespace, spec.transport, spec.url, spec.command, spec.args, spec.cwd)


def _client(spec: UpstreamSpec, handler: MessageHandlerFnT, stack: AsyncExitStack) -> Client:
    """The SDK client for one upstream; an HTTP client it needs is closed with ``stack``."""
    if spec.transport == "stdio":
        assert spec.command is not None
        parameters = StdioServerParameters(
            command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd
        )
        server: Any = stdio_client(parameters, errlog=_errlog())
    else:
        assert spec.url is not None
        http = create_mcp_http_client(headers=dict(spec.headers))
        stack.push_async_callback(http.aclose)  # the SDK leaves a client it was given open
        server = streamable_http_client(spec.url, http_client=http)
    return Client(
        server,
        read_timeout_seconds=spec.timeout_seconds,
        message_handler=handler,
        cache=None,  # the gateway keeps its own catalogue; calls must always reach the tool
    )


def _errlog() -> TextIO:
    """Where a stdio upstream's stderr goes: this process's real stderr. A worker or a test
    runner may have replaced ``sys.stderr`` with an object that has no file descriptor."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (OSError, ValueError, AttributeError):
            continue
    return _devnull()


@cache
def _devnull() -> TextIO:
    return open(os.devnull, "w")  # kept open for the life of the process


def _result(result: CallToolResult) -> UpstreamResult:
    text = "\n".join(item.text for item in result.content if isinstance(item, TextContent))
    structured = result.structured_content
    return UpstreamResult(
        text=text,
        structured=dict(structured) if isinstance(structured, dict) else None,
        is_error=bool(result.is_error),
    )


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else type(exc).__name__


async def _as_coroutine(work: Awaitable[T]) -> T:
    return await work


_POOL: McpUpstreams | None = None
_POOL_PID: int | None = None
_POOL_LOCK = threading.Lock()


def pool() -> McpUpstreams:
    """This process's pool (a forked child gets a new one: threads do not survive a fork)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or os.getpid() != _POOL_PID:
            _POOL, _POOL_PID = McpUpstreams(), os.getpid()
        return _POOL
