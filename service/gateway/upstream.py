"""What the gateway's actions need of an upstream MCP server, without any MCP library.

The actions and checks of the gateway are core code and know only these plain types; the
MCP SDK client that implements ``Upstreams`` lives in ``service.gateway.mcp_client``, a
transport adapter loaded by name when a gateway file names MCP servers (as action modules
are), so the core's "no transport framework" contract holds for everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class UpstreamSpec:
    """How to reach one upstream MCP server (secrets already resolved; never logged)."""

    namespace: str
    transport: Literal["stdio", "http"]
    timeout_seconds: float
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict, hash=False, repr=False)


@dataclass(frozen=True)
class UpstreamTool:
    """One entry of an upstream's ``tools/list``."""

    name: str
    description: str
    input_schema: dict[str, Any]
    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None


@dataclass(frozen=True)
class UpstreamResult:
    """A ``tools/call`` result: its text, its structured content, whether it is an error."""

    text: str
    structured: dict[str, Any] | None
    is_error: bool


class UpstreamFailure(Exception):
    """The call did not get an answer from the tool: a transport failure, a timeout, or a
    protocol error. ``transient`` says whether trying again may help."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


ChangeListener = Callable[[str, list[UpstreamTool]], None]


class Upstreams(Protocol):
    """Process-wide connections to upstream MCP servers, called synchronously."""

    def tools(self, spec: UpstreamSpec, *, refresh: bool = False) -> list[UpstreamTool]:
        """The upstream's catalogue (cached; re-read when ``refresh`` or on list_changed)."""
        ...

    def call_tool(
        self,
        spec: UpstreamSpec,
        name: str,
        arguments: dict[str, Any],
        *,
        meta: dict[str, Any] | None = None,
    ) -> UpstreamResult:
        """Call one tool once; UpstreamFailure when no answer came."""
        ...

    def on_change(self, listener: ChangeListener) -> None:
        """Call ``listener(namespace, tools)`` whenever an upstream's catalogue was re-read."""
        ...
