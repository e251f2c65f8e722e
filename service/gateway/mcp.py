"""Upstream kinds: MCP servers, over stdio (a command) or streamable HTTP (a URL).

``mcp:`` entries of the gateway file, told apart by ``transport``. Building one reads the
server's catalogue and checks it against the declarations: a declared tool the upstream
does not have is an error, an upstream tool nobody declared is listed and not exposed; each
declared tool's schema is made strict and becomes an action (``mcp_actions``).
"""

from __future__ import annotations

import importlib
import sys
from abc import abstractmethod
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from service.gateway.actions import declared_action
from service.gateway.declarations import (
    ToolDeclaration,
    UpstreamDeclaration,
    Value,
    check_url,
    resolve_values,
)
from service.gateway.errors import GatewayError
from service.gateway.kinds import Build, DeclaredTool, UpstreamKind
from service.gateway.mcp_actions import McpReadAction, McpWriteAction, schema_sha256
from service.gateway.schema import strict_model
from service.gateway.upstream import UpstreamFailure, Upstreams, UpstreamSpec, UpstreamTool
from service.gateway.where import Where
from service.registry.base import Action


class McpTool(ToolDeclaration):
    """One upstream tool, declared. Undeclared tools are never exposed."""

    write_only: ClassVar[tuple[str, ...]] = ("summary", "money", "idempotency_argument")

    idempotency_argument: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
    )

    def idempotency_target(self) -> str | None:
        return self.idempotency_argument


class McpServer(UpstreamDeclaration):
    """One upstream MCP server; its transport's model says how it is reached."""

    section: ClassVar[str] = "mcp"
    tools_key: ClassVar[str] = "tools"
    discriminator: ClassVar[str | None] = "transport"
    # An execution re-reads the catalogue, then calls the tool; the pool waits for each
    # up to timeout_seconds + 1 s (service.gateway.mcp_client).
    calls_per_execution: ClassVar[int] = 2
    call_overhead_seconds: ClassVar[float] = 1.0

    transport: str
    tools: dict[str, McpTool]

    def spec(self, where: Where) -> UpstreamSpec:
        """How to reach it, secrets resolved (GatewayError naming a missing one)."""
        return UpstreamSpec(
            namespace=self.namespace,
            transport=self.transport,  # type: ignore[arg-type]  # each subclass's Literal
            timeout_seconds=self.timeout_seconds,
            **self._reach(where),
        )

    @abstractmethod
    def _reach(self, where: Where) -> dict[str, Any]:
        """The transport's part of the spec."""

    def reached(self) -> dict[str, Any]:
        """Where and how it is reached, as declared: secret REFERENCES, never values."""
        declared = self.model_dump(
            mode="json", include={"transport", "url", "command", "args", "cwd", "env", "headers"}
        )
        blank: dict[str, Any] = {
            "url": None,
            "command": None,
            "args": [],
            "cwd": None,
            "env": {},
            "headers": {},
        }
        return {**blank, **declared}


class McpStdio(McpServer):
    """draftgate starts the command: one child per draftgate process."""

    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, Value] = Field(default_factory=dict)
    cwd: str | None = None

    def _reach(self, where: Where) -> dict[str, Any]:
        env = resolve_values(self.env, where=where / "env")
        return {"command": self.command, "args": tuple(self.args), "env": env, "cwd": self.cwd}


class McpHttp(McpServer):
    """Streamable HTTP: https, or http to a loopback address only."""

    transport: Literal["http"]
    url: str
    headers: dict[str, Value] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        check_url(url)
        return url

    def _reach(self, where: Where) -> dict[str, Any]:
        return {"url": self.url, "headers": resolve_values(self.headers, where=where / "headers")}


def upstreams() -> Upstreams:
    """This process's MCP client pool. Loaded by name: the MCP SDK stays out of the core's
    static imports (``service.gateway.upstream``)."""
    module = importlib.import_module("service.gateway.mcp_client")
    pool: Upstreams = module.pool()
    return pool


def close_upstreams() -> None:
    """Close this process's upstream connections, if it opened any (stdio children exit)."""
    if "service.gateway.mcp_client" in sys.modules:
        sys.modules["service.gateway.mcp_client"].pool().close()


def build_mcp(server: McpServer, build: Build) -> None:
    """The actions of one MCP server's declared tools, checked against its catalogue."""
    try:
        spec = server.spec(build.where)
        client = upstreams()
        catalogue = {tool.name: tool for tool in client.tools(spec, refresh=build.refresh)}
    except GatewayError as exc:
        build.refuse(exc)
        return
    except UpstreamFailure as failure:
        build.problem(build.where, f"cannot read the upstream's tools: {failure.message}")
        return
    undeclared = sorted(set(catalogue) - set(server.tools))
    if undeclared:
        build.report.undeclared[server.namespace] = undeclared
    for tool in build.tools(server):
        upstream_tool = catalogue.get(tool.key)
        if upstream_tool is None:
            build.problem(tool.where, "declared, but the upstream has no tool of this name")
            continue
        if tool.declaration.kind == "read" and (
            upstream_tool.read_only_hint is False or upstream_tool.destructive_hint is True
        ):  # hints only: the declaration decides, but a human should look at this one
            build.warn(
                tool.where,
                "declared read but the upstream says it writes "
                "(its annotations: not read-only or destructive)",
            )
        try:
            build.add(_action(server, spec, client, tool, upstream_tool, build))
        except GatewayError as exc:
            build.refuse(exc)


def _action(
    server: McpServer,
    spec: UpstreamSpec,
    client: Upstreams,
    tool: DeclaredTool,
    upstream: UpstreamTool,
    build: Build,
) -> Action:
    argument = tool.declaration.idempotency_target()
    if argument is not None and argument not in upstream.input_schema.get("properties", {}):
        raise (tool.where / "idempotency_argument").error(
            f"{argument!r} is not an argument of the upstream tool"
        )
    drop = frozenset({argument} if argument is not None else set[str]())
    model = strict_model(tool.name, upstream.input_schema, where=str(tool.where), drop=drop)
    title = tool.declaration.title or upstream.title or f"{server.namespace}: {tool.key}"
    return declared_action(
        (McpReadAction, McpWriteAction),
        build,
        tool,
        model,
        title=title,
        description=tool.declaration.description or upstream.description or title,
        reached={"upstream": server.reached()},
        attributes={
            "upstreams": client,
            "spec": spec,
            "tool": tool.key,
            "mask": tuple(tool.declaration.mask),
            "schema_sha256": schema_sha256(upstream.input_schema),
            "idempotency_argument": argument,
        },
    )


KINDS = [UpstreamKind(McpStdio, build_mcp), UpstreamKind(McpHttp, build_mcp)]
