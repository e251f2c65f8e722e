"""MCP tools generated from the core's tool catalog, served by the SDK's low-level server.

The low-level ``Server`` hands every ``tools/call`` to one handler with the raw
arguments, so the core owns validation, the transaction, the audit record and the
error shape (DESIGN.md §11): nothing is dropped or reworded by the SDK, and an
unknown tool name reaches the core to be refused and audited like any other call.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import anyio
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)

from mcp_adapter import drafts
from mcp_adapter import metrics as tool_metrics
from mcp_adapter.auth import DOOR, authenticate_for_mcp, request_caller
from mcp_adapter.errors import as_tool_error
from service.audit.refusals import Refusal, Throttle, record_refusal, record_refusal_apart
from service.db import unavailable
from service.errors import DomainError, internal_error
from service.principal import Principal
from service.runtime import Runtime
from service.telemetry import tool_call
from service.toolcalls import actions as toolcalls
from service.toolcalls.schemas import ToolKind, ToolSpec
from service.tracing import trace_id_from
from service.validation import input_schema, output_schema

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolDoor:
    """Runs one tool call through the core. ``stdio_token`` authenticates calls without HTTP."""

    runtime: Runtime
    stdio_token: str | None = None

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        trace_id: str,
        principal: Principal | None,
        *,
        method: str = "tools/call",
    ) -> dict[str, Any]:
        """One agent call through the core: ``tools/call`` of tool ``name``, or another MCP
        method on the agent's drafts (``toolcalls.actions.METHODS``, ``name`` = ``method``)."""
        engine, started = self.runtime.engine, time.perf_counter()
        principal = self.principal(principal, trace_id)

        def refusal(error: DomainError) -> Refusal:
            latency_us = int((time.perf_counter() - started) * 1_000_000)
            return toolcalls.refused_call(
                principal,
                error,
                name=name,
                arguments=arguments,
                latency_us=latency_us,
                trace_id=trace_id,
            )

        def refused(session: Any, error: DomainError) -> None:
            record_refusal(session, refusal(error))

        limited = self.over_limit(principal)
        if limited is not None:  # a flood: its refusals are audited as a count
            throttle = Throttle(self.runtime.limiter, f"tools:{principal.token_id}")
            record_refusal_apart(engine, refusal(limited), throttle=throttle)
            raise limited
        try:
            return toolcalls.call_tool(
                self.runtime,
                principal,
                name=name,
                arguments=arguments,
                trace_id=trace_id,
                on_refusal=refused,
                method=method,
            )
        except DomainError:
            raise
        except Exception as exc:
            error = unavailable(exc) or internal_error()
            logger.exception("tool %s failed: %s (trace %s)", name, error.code, trace_id)
            try:
                record_refusal_apart(engine, refusal(error))
            except Exception:  # the database is still away: the refusal is only logged
                logger.warning("could not audit the failed call of %s", name, exc_info=True)
            raise error from exc

    def principal(self, principal: Principal | None, trace_id: str) -> Principal:
        """The caller: proved by its access token over HTTP, by the stdio token (again, on
        every call) over stdio."""
        if principal is not None:
            return principal
        try:
            return authenticate_for_mcp(
                self.runtime, self.stdio_token, trace_id=trace_id, door=f"{DOOR}-stdio"
            )
        except Exception as exc:
            raise (unavailable(exc) or exc) from exc

    def over_limit(self, principal: Principal) -> DomainError | None:
        try:
            self.runtime.limiter.check_token(principal.token_id)
        except DomainError as limited:
            return limited
        return None


def mcp_tools(runtime: Runtime) -> list[Tool]:
    """The catalog as MCP tools: the core's strict schemas, hints as annotations."""
    return [_tool(spec) for spec in toolcalls.catalog(runtime.registry)]


def draft_tools(runtime: Runtime) -> dict[str, ToolKind]:
    """The tools whose answer is a draft (``propose_*``, ``get_draft``), by kind."""
    kinds = (ToolKind.PROPOSE, ToolKind.DRAFT_STATUS)
    return {
        spec.name: spec.kind for spec in toolcalls.catalog(runtime.registry) if spec.kind in kinds
    }


def _tool(spec: ToolSpec) -> Tool:
    return Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=input_schema(spec.input_model),
        output_schema=output_schema(spec.output_model),
        annotations=ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=spec.destructive,
            idempotent_hint=spec.idempotent,
            open_world_hint=spec.open_world,
        ),
    )


@dataclass(frozen=True)
class ToolHandlers:
    """The ``tools/list`` and ``tools/call`` handlers of the low-level server."""

    door: ToolDoor
    tools: list[Tool]
    # The tools that answer with a draft (``draft_tools``): linked to its resource, and a
    # proposal is a task for a client that declares the tasks extension.
    draft_kinds: dict[str, ToolKind] = field(default_factory=dict)

    @cached_property
    def by_name(self) -> dict[str, Tool]:
        return {tool.name: tool for tool in self.tools}

    async def list_tools(self, ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=self.tools)

    def input_schema_of(self, name: str) -> dict[str, Any] | None:
        """A tool's input schema, for the SDK's check of ``Mcp-Param-*`` headers: without it
        the SDK calls ``list_tools`` and serializes every tool on every call (~2 ms)."""
        tool = self.by_name.get(name)
        return tool.input_schema if tool is not None else None

    async def call_tool(self, ctx: Any, params: CallToolRequestParams) -> Any:
        """Trace id from ``traceparent``, principal from the verified access token (HTTP) or
        the stdio token, the work itself in a thread; every refusal a structured error. A
        draft comes back with a link to its resource, and as a task (``resultType: task``)
        when the client declared the tasks extension on this call."""
        principal, traceparent = request_caller(ctx)
        # The name is the model's text: one not in the catalogue names no span and no series.
        known = params.name if params.name in self.by_name else None
        # The span first: the trace id the core records is the span's (service.tracing).
        with tool_call(known, traceparent) as span:
            work = partial(
                self.door.call,
                params.name,
                params.arguments or {},
                trace_id_from(traceparent),
                principal,
            )
            try:
                with tool_metrics.observed(known):
                    result = await anyio.to_thread.run_sync(work)
            except DomainError as error:
                span.finish(error.code)
                return as_tool_error(error)
            span.finish("ok", draft_id=result.get("draft_id"))
        kind = self.draft_kinds.get(params.name)
        if kind is None:  # a read's answer
            return CallToolResult(
                content=[TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
                structured_content=result,
            )
        if kind is ToolKind.PROPOSE and drafts.wants_tasks(ctx):
            return {**drafts.task(result), "resultType": "task"}
        return drafts.tool_result(result)
