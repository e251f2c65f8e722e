"""The client side of MCP 2026-07-28's tasks extension and of ``subscriptions/listen``, as an
agent runtime would drive them (for tests and benches): the SDK's own ``Client`` with the
extension declared (a ``ResultClaim`` for ``resultType: task``) and its generic
``send_request`` for ``tasks/*`` (mcp 2.3 ships no task helpers); a listen stream read off
the wire, since the SDK's ``Client.listen`` has no ``taskIds``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"


class CreatedTask(types.Result):
    """``CreateTaskResult``: the task fields, flat, with ``resultType: task``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TaskState(types.Result):
    """``tasks/get``'s answer: the task, and its ``result`` once completed."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTask(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def _unresolved(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    raise AssertionError("call with allow_claimed=True: these tests follow the task themselves")


class Tasks(ClientExtension):
    """Declares the tasks extension and claims its ``resultType: task``."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=_unresolved,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            )
        ]


@asynccontextmanager
async def tasks_client(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http), extensions=[Tasks()]) as client,
    ):
        yield client


async def propose_as_task(client: Client, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    created = await client.session.call_tool(tool, arguments, allow_claimed=True)
    assert isinstance(created, CreatedTask), created
    return created.model_dump(by_alias=True, mode="json")


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    state = await client.session.send_request(
        GetTask(params=TaskIdParams(task_id=task_id)), TaskState
    )
    return state.model_dump(by_alias=True, mode="json")


async def cancel_task(client: Client, task_id: str) -> dict[str, Any]:
    ack = await client.session.send_request(
        CancelTask(params=TaskIdParams(task_id=task_id)), TaskState
    )
    return ack.model_dump(by_alias=True, mode="json")


def _meta(tasks: bool) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "draftgate-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


@asynccontextmanager
async def listen(
    url: str, token: str, notifications: dict[str, Any], *, tasks: bool = True
) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
    """A ``subscriptions/listen`` stream: yields each JSON-RPC frame (notification or the
    final result) as it arrives."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "subscriptions/listen",
        "params": {"_meta": _meta(tasks), "notifications": notifications},
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": "subscriptions/listen",
        "Accept": "application/json, text/event-stream",
    }
    async with (
        httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60)) as http,
        http.stream("POST", url, json=body, headers=headers) as response,
    ):

        async def frames() -> AsyncIterator[dict[str, Any]]:
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                yield json.loads(await response.aread())
                return
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    yield json.loads(line.removeprefix("data:").strip())

        yield frames()
