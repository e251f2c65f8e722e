"""The gateway file (``DRAFTGATE_GATEWAY_FILE``): upstream MCP servers and REST APIs.

YAML, read with the safe loader; every error names ``<file>:<line>: <path>: <problem>``
(lines from the composed nodes' marks). The format is documented in docs/gateway.md.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from service.gateway.declarations import (
    NAMESPACE_PATTERN,
    Declared,
    MoneyPath,
    Value,
    parse_path,
)
from service.gateway.errors import GatewayError
from service.gateway.http import HttpService
from service.registry.base import Risk

MAX_FILE_BYTES = 1_000_000
MAX_NODES = 100_000  # aliases can make a small file expand without bound
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"


class McpTool(Declared):
    """One upstream tool, declared. Undeclared tools are never exposed."""

    kind: Literal["read", "write"]
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, min_length=1, max_length=4000)
    mask: list[str] = Field(default_factory=list, max_length=100)
    # write only (see WriteDeclaration)
    summary: str | None = Field(default=None, min_length=1, max_length=500)
    risk: Risk = Risk.MEDIUM
    money: MoneyPath | None = None
    idempotency_argument: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
    )
    contract_version: int = Field(default=1, ge=1, le=1_000_000)

    @field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        return Risk(value) if value in {r.value for r in Risk} else value

    @field_validator("mask")
    @classmethod
    def _mask_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parse_path(path)
        return paths

    @model_validator(mode="after")
    def _by_kind(self) -> McpTool:
        if self.kind == "write" and self.summary is None:
            raise ValueError("a write tool needs a summary template (what the approver reads)")
        if self.kind == "read":
            written = [
                name
                for name in ("summary", "money", "idempotency_argument")
                if getattr(self, name) is not None
            ]
            if written:
                raise ValueError(f"a read tool takes no {', '.join(written)}")
        return self


class McpServer(Declared):
    """One upstream MCP server, over stdio (a command) or streamable HTTP (a URL)."""

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    transport: Literal["stdio", "http"]
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, Value] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, Value] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=10, gt=0, le=300)
    tools: dict[str, McpTool]

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, tools: dict[str, McpTool]) -> dict[str, McpTool]:
        for name in tools:
            if not re.fullmatch(TOOL_NAME_PATTERN, name):
                raise ValueError(f"{name!r} is not a usable tool name")
        return tools

    @model_validator(mode="after")
    def _by_transport(self) -> McpServer:
        if self.transport == "stdio":
            if self.command is None:
                raise ValueError("a stdio upstream needs a command")
            if self.url is not None or self.headers:
                raise ValueError("url and headers are for http upstreams")
        else:
            if self.url is None:
                raise ValueError("an http upstream needs a url")
            if self.command is not None or self.args or self.env or self.cwd:
                raise ValueError("command, args, env and cwd are for stdio upstreams")
            check_url(self.url)
        return self


def check_url(url: str) -> None:
    """https anywhere, plain http only to this machine (a token must not cross a network
    in the clear). ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ValueError("a URL carries no credentials; use headers with a secret reference")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError("plain http is allowed only to a loopback address; use https")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GatewayFile(Declared):
    version: Literal[1]
    mcp: list[McpServer] = Field(default_factory=list)
    http: list[HttpService] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_namespaces(self) -> GatewayFile:
        seen: set[str] = set()
        for namespace in [s.namespace for s in self.mcp] + [s.namespace for s in self.http]:
            if namespace in seen:
                raise ValueError(f"namespace {namespace!r} is used twice")
            seen.add(namespace)
        return self


def load_gateway_file(path: Path) -> GatewayFile:
    """Read and validate the gateway file; GatewayError naming every problem's line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GatewayError(f"{path}: cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise GatewayError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    return parse_gateway_text(raw.decode("utf-8", errors="replace"), name=str(path))


def parse_gateway_text(text: str, *, name: str) -> GatewayFile:
    """The gateway file's text, validated; ``name`` is what errors call the file."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise GatewayError(f"{name}:{line}: (file): not valid YAML: {problem}") from None
    if root is None:
        raise GatewayError(f"{name}:1: (file): the file is empty")
    lines: dict[tuple[str | int, ...], int] = {}
    data = _Converter(name, lines).convert(root, ())
    try:
        return GatewayFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = [_problem(name, data, lines, e) for e in errors if not _shadowed(e, errors)]
        raise GatewayError("\n".join(dict.fromkeys(problems))) from None


def _shadowed(error: Any, errors: list[Any]) -> bool:
    """A ``str | SecretRef`` value that is a mapping fails as "not a string" too; the
    SecretRef member's own errors say what is wrong with it."""
    loc = error["loc"]
    if not loc or loc[-1] != "str":
        return False
    return any(other["loc"][: len(loc) - 1] == loc[:-1] and other is not error for other in errors)


def _problem(name: str, data: Any, lines: dict[tuple[str | int, ...], int], error: Any) -> str:
    """One validation error as ``<file>:<line>: <path>: <problem>``. Union members add
    their type to pydantic's location (``str``, ``SecretRef``): only parts the file has
    are kept, plus the missing or unknown key itself."""
    location: list[str | int] = []
    node = data
    for part in error["loc"]:
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        ):
            node = node[part]
        elif error["type"] == "missing" and part == error["loc"][-1]:
            pass  # the key that should be there
        else:
            continue
        location.append(part)
    known = tuple(location)
    while known and known not in lines:
        known = known[:-1]
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required"
    return f"{name}:{lines.get(known, 1)}: {dotted(tuple(location)) or '(file)'}: {message}"


def _has(node: Any, part: Any) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and part < len(node)


def dotted(location: tuple[str | int, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class _Converter:
    """YAML nodes to plain data, noting each value's line; duplicate keys are errors."""

    def __init__(self, name: str, lines: dict[tuple[str | int, ...], int]) -> None:
        self.name = name
        self.lines = lines
        self.nodes = 0
        self.scalars = yaml.constructor.SafeConstructor()

    def convert(self, node: yaml.Node, path: tuple[str | int, ...]) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise GatewayError(f"{self.name}:{node.start_mark.line + 1}: too many values")
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = self.scalars.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if not isinstance(key, str):
                    raise GatewayError(
                        f"{self.name}:{line}: {dotted(path) or '(file)'}: key {key!r} is not text"
                    )
                if key in result:
                    raise GatewayError(
                        f"{self.name}:{line}: {dotted((*path, key))}: the key is written twice"
                    )
                self.lines[(*path, key)] = line
                result[key] = self.convert(value_node, (*path, key))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.scalars.construct_object(node)
