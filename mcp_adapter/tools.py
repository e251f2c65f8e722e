"""MCP tools generated from the core's tool catalog.

The SDK's function-based tools derive their schema from a signature and
silently drop unknown arguments (DESIGN.md §11), so each tool here publishes
the core's strict schema and hands the raw arguments to the core, which owns
validation, the transaction and the audit record.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import PrivateAttr

from mcp_adapter.auth import DOOR, authenticate_for_mcp, principal_from
from mcp_adapter.errors import internal_error, tool_error
from service.db import run_unit, session_scope
from service.errors import DomainError
from service.principal import Principal
from service.runtime import Runtime
from service.toolcalls import actions as toolcalls
from service.toolcalls.schemas import ToolSpec
from service.tracing import trace_id_from
from service.validation import input_schema, output_schema

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolDoor:
    """Runs one tool call through the core. ``stdio_token`` authenticates calls without HTTP."""

    runtime: Runtime
    stdio_token: str | None = None

    def call(
        self, name: str, arguments: dict[str, Any], trace_id: str, principal: Principal | None
    ) -> dict[str, Any]:
        engine, started = self.runtime.engine, time.perf_counter()
        if principal is None:  # stdio: every call proves the configured token again
            principal = authenticate_for_mcp(
                self.runtime, self.stdio_token, trace_id=trace_id, door=f"{DOOR}-stdio"
            )

        def refused(session: Any, error: DomainError) -> None:
            toolcalls.record_refused_call(
                session,
                principal,
                name=name,
                arguments=arguments,
                error=error,
                latency_us=int((time.perf_counter() - started) * 1_000_000),
                trace_id=trace_id,
            )

        try:
            return run_unit(
                engine,
                lambda session: toolcalls.call_tool(
                    session,
                    principal,
                    self.runtime,
                    name=name,
                    arguments=arguments,
                    trace_id=trace_id,
                ),
                on_refusal=refused,
            )
        except DomainError:
            raise
        except Exception as exc:
            logger.exception("tool %s failed unexpectedly (trace %s)", name, trace_id)
            error = internal_error()
            with session_scope(engine) as session:
                refused(session, error)
            raise error from exc


async def dispatch(
    door: ToolDoor, name: str, arguments: dict[str, Any], context: Any
) -> CallToolResult:
    """Run a tool call from the MCP layer: trace id from ``traceparent``, principal from the
    verified access token (HTTP) or the stdio token, the work itself in a thread."""
    request = getattr(getattr(context, "request_context", None), "request", None)
    traceparent = request.headers.get("traceparent") if request is not None else None
    trace_id = trace_id_from(traceparent)
    access_token = get_access_token()
    principal = principal_from(access_token) if access_token is not None else None
    try:
        result = await anyio.to_thread.run_sync(
            partial(door.call, name, arguments, trace_id, principal)
        )
    except DomainError as error:
        raise tool_error(error) from None
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
        structured_content=result,
    )


class RegistryTool(Tool):
    """An MCP tool whose schema and behaviour come from the core's ToolSpec."""

    _door: ToolDoor = PrivateAttr()

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> CallToolResult:
        return await dispatch(self._door, self.name, arguments, context)


async def _unused(**_: Any) -> None:  # pragma: no cover - RegistryTool.run never calls fn
    return None


def build_tools(door: ToolDoor) -> list[Tool]:
    return [_tool(spec, door) for spec in toolcalls.catalog(door.runtime.registry)]


def _tool(spec: ToolSpec, door: ToolDoor) -> RegistryTool:
    tool = RegistryTool(
        fn=_unused,
        name=spec.name,
        title=spec.title,
        description=spec.description,
        parameters=input_schema(spec.input_model),
        fn_metadata=FuncMetadata(
            arg_model=ArgModelBase, output_schema=output_schema(spec.output_model)
        ),
        is_async=True,
        annotations=ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=spec.open_world,
        ),
    )
    tool._door = door
    return tool
