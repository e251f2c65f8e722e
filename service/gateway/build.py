"""The gateway file, turned into checked actions (at start-up and by ``draftgate gateway``).

For each upstream MCP server: read its catalogue, check it against the declarations
(a declared tool the upstream does not have is an error; an upstream tool nobody declared
is listed and not exposed), make each declared tool's schema strict, parse its template,
and build its action. HTTP services are built by ``service.gateway.http``. Every problem
is collected, so one run names them all. Write actions then get their contract_version
from the database (``contracts``): a changed schema or declaration is a new version.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from service.canonical import canonical_json, sha256_hex
from service.gateway import contracts
from service.gateway.actions import read_action, schema_sha256, write_action
from service.gateway.config import GatewayFile, McpServer, McpTool, dotted, load_gateway_file
from service.gateway.declarations import (
    SecretRef,
    WriteContract,
    WriteDeclaration,
    declared_values,
)
from service.gateway.errors import GatewayError
from service.gateway.schema import strict_model
from service.gateway.upstream import UpstreamFailure, Upstreams, UpstreamSpec, UpstreamTool
from service.policies.schemas import PolicyConfig
from service.registry.base import Action, WriteAction
from service.registry.loader import ActionRegistry, build_registry
from service.text import inert
from service.validation import input_schema

logger = logging.getLogger(__name__)
MAX_DESCRIPTION = 4000
PROPOSE_NOTE = (
    "Only PROPOSES the change: it records a draft that a human must approve; nothing happens "
    "upstream until then. "
)


@dataclass
class GatewayReport:
    """What a build found: actions, upstream tools nobody declared, and problems."""

    actions: list[Action] = field(default_factory=list)
    undeclared: dict[str, list[str]] = field(default_factory=dict)  # namespace → tool names
    problems: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)  # write action → contract_version
    warnings: list[str] = field(default_factory=list)  # served, but an operator should look


def upstreams() -> Upstreams:
    """This process's MCP client pool. Loaded by name: the MCP SDK stays out of the core's
    static imports (``service.gateway.upstream``)."""
    module = importlib.import_module("service.gateway.mcp_client")
    pool: Upstreams = module.pool()
    return pool


def build_gateway(
    path: Path,
    *,
    reserved: Iterable[str] = (),
    policies: dict[str, PolicyConfig] | None = None,
    engine: Engine | None = None,
    client: Upstreams | None = None,
    refresh: bool = False,
) -> GatewayReport:
    """Every action the gateway file declares, checked; see ``GatewayReport``.

    ``reserved`` are names already taken (the shop's actions); ``policies`` the configured
    approval policies (a write whose policy has amount tiers must say where its money is);
    ``engine`` records contract versions (without one every write keeps its declared base).
    """
    declared = load_gateway_file(path)
    report = GatewayReport()
    name = str(path)
    if declared.mcp:
        client = client or upstreams()
    for index, server in enumerate(declared.mcp):
        assert client is not None
        where = f"{name}: {dotted(('mcp', index))} ({server.namespace})"
        _mcp_actions(server, client, where=where, report=report, refresh=refresh)
    report.actions += _http_actions(declared, name, report)
    _check_names(report, set(reserved))
    _check_money(report, policies or {})
    if report.problems:
        return report
    _contract_versions(report, engine)
    return report


def raise_for_problems(report: GatewayReport) -> None:
    if report.problems:
        raise GatewayError("gateway: " + "\n".join(report.problems))


def _spec(server: McpServer, *, where: str) -> UpstreamSpec:
    env = {
        key: value.resolve(where=f"{where}: env.{key}") if isinstance(value, SecretRef) else value
        for key, value in server.env.items()
    }
    headers = {
        key: value.resolve(where=f"{where}: headers.{key}")
        if isinstance(value, SecretRef)
        else value
        for key, value in server.headers.items()
    }
    return UpstreamSpec(
        namespace=server.namespace,
        transport=server.transport,
        timeout_seconds=server.timeout_seconds,
        command=server.command,
        args=tuple(server.args),
        env=env,
        cwd=server.cwd,
        url=server.url,
        headers=headers,
    )


def _mcp_actions(
    server: McpServer, client: Upstreams, *, where: str, report: GatewayReport, refresh: bool
) -> None:
    try:
        spec = _spec(server, where=where)
        catalogue = {tool.name: tool for tool in client.tools(spec, refresh=refresh)}
    except GatewayError as exc:
        report.problems.append(str(exc))
        return
    except UpstreamFailure as failure:
        report.problems.append(f"{where}: cannot read the upstream's tools: {failure.message}")
        return
    missing = sorted(set(server.tools) - set(catalogue))
    if missing:
        report.problems.append(
            f"{where}: declared tools the upstream does not have: {', '.join(missing)}"
        )
    undeclared = sorted(set(catalogue) - set(server.tools))
    if undeclared:
        report.undeclared[server.namespace] = undeclared
    for tool_name, declaration in server.tools.items():
        upstream_tool = catalogue.get(tool_name)
        if upstream_tool is None:
            continue
        if declaration.kind == "read" and (
            upstream_tool.read_only_hint is False or upstream_tool.destructive_hint is True
        ):  # hints only: the declaration decides, but a human should look at this one
            report.warnings.append(
                f"{where}: tools.{tool_name}: declared read but the upstream says it writes "
                "(its annotations: not read-only or destructive)"
            )
        try:
            report.actions.append(
                _mcp_action(
                    spec,
                    client,
                    tool_name,
                    declaration,
                    upstream_tool,
                    where=f"{where}: tools.{tool_name}",
                    reached=_reached(server),
                )
            )
        except GatewayError as exc:
            report.problems.append(str(exc))


def _reached(server: McpServer) -> dict[str, Any]:
    """Where and how an upstream is reached, as declared: secret REFERENCES, never values."""
    return {
        "transport": server.transport,
        "url": server.url,
        "command": server.command,
        "args": list(server.args),
        "cwd": server.cwd,
        "env": declared_values(server.env),
        "headers": declared_values(server.headers),
    }


def action_name(namespace: str, tool: str) -> str:
    """``memory`` + ``read_graph`` → ``memory_read_graph``; camelCase and other characters
    become snake_case, since action names are lower_snake_case."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", tool).lower()
    return f"{namespace}_{re.sub(r'[^a-z0-9]+', '_', snake).strip('_')}"


def _mcp_action(
    spec: UpstreamSpec,
    client: Upstreams,
    tool_name: str,
    declaration: McpTool,
    upstream: UpstreamTool,
    *,
    where: str,
    reached: dict[str, Any] | None = None,
) -> Action:
    name = action_name(spec.namespace, tool_name)
    argument = declaration.idempotency_argument
    drop = frozenset({argument} if argument is not None else set[str]())
    if drop and declaration.idempotency_argument not in upstream.input_schema.get("properties", {}):
        raise GatewayError(
            f"{where}: idempotency_argument {declaration.idempotency_argument!r} is not an "
            "argument of the upstream tool"
        )
    model = strict_model(name, upstream.input_schema, where=where, drop=drop)
    title = declaration.title or upstream.title or f"{spec.namespace}: {tool_name}"
    description = inert(declaration.description or upstream.description or title)
    digest = schema_sha256(upstream.input_schema)
    if declaration.kind == "read":
        return read_action(
            upstreams=client,
            spec=spec,
            tool=tool_name,
            title=inert(title)[:200],
            description=description[:MAX_DESCRIPTION],
            input_model=model,
            mask=declaration.mask,
            schema_digest=digest,
        )
    assert declaration.summary is not None
    write = WriteDeclaration(
        summary=declaration.summary,
        risk=declaration.risk,
        money=declaration.money,
        idempotency_argument=declaration.idempotency_argument,
        contract_version=declaration.contract_version,
    )
    contract = WriteContract(write, model, where=where)
    return write_action(
        upstreams=client,
        spec=spec,
        tool=tool_name,
        title=inert(title)[:200],
        description=(PROPOSE_NOTE + description)[:MAX_DESCRIPTION],
        input_model=model,
        contract=contract,
        mask=declaration.mask,
        schema_digest=digest,
        contract_version=declaration.contract_version,
        # What an approval means beyond the schema: where the call goes (a changed one is a
        # new contract_version) and the write's declaration.
        declaration_fingerprint={"upstream": reached, **write.model_dump(mode="json")},
    )


def _http_actions(declared: GatewayFile, name: str, report: GatewayReport) -> list[Action]:
    if not declared.http:
        return []
    from service.gateway.http import http_actions  # the http section's own builder

    actions: list[Action] = []
    for index, service in enumerate(declared.http):
        where = f"{name}: {dotted(('http', index))} ({service.namespace})"
        try:
            actions += http_actions(service, where=where)
        except GatewayError as exc:
            report.problems.append(str(exc))
    return actions


def _check_names(report: GatewayReport, reserved: set[str]) -> None:
    seen: set[str] = set()
    for action in report.actions:
        if action.name in reserved:
            report.problems.append(
                f"gateway action {action.name} collides with an existing action of that name; "
                "choose another namespace"
            )
        elif action.name in seen:
            report.problems.append(
                f"gateway action {action.name} is declared twice (two tool names map to it)"
            )
        seen.add(action.name)


def _check_money(report: GatewayReport, policies: dict[str, PolicyConfig]) -> None:
    """A policy with amount tiers (or cumulative amounts) means nothing without the amount."""
    for action in report.actions:
        policy = policies.get(action.name)
        if policy is None or not isinstance(action, WriteAction):
            continue
        needs_amount = isinstance(policy.tiers, dict) or policy.cumulative is not None
        contract = getattr(action, "contract", None)  # MCP and HTTP writes: a WriteContract
        if needs_amount and isinstance(contract, WriteContract) and contract.money is None:
            report.problems.append(
                f"write {action.name}: its policy has amount tiers, but the declaration names "
                "no money path (declare money: {amount_minor: ..., currency: ...})"
            )


def _fingerprint(action: WriteAction) -> str:
    """What a write's contract is: its strict input schema and its declaration."""
    declared: Any = getattr(action, "declaration_fingerprint", None)
    contract = getattr(action, "contract", None)
    if declared is None and contract is not None:
        declared = contract.declaration.model_dump(mode="json")
    body = {
        "input": input_schema(action.Input),
        "upstream_schema": getattr(action, "schema_sha256", None),
        "declaration": declared,
    }
    return sha256_hex(canonical_json(body))


def _contract_versions(report: GatewayReport, engine: Engine | None) -> None:
    writes = [a for a in report.actions if isinstance(a, WriteAction)]
    digests = {a.name: (_fingerprint(a), type(a).contract_version) for a in writes}
    if engine is None or not digests:
        report.versions = {name: base for name, (_, base) in digests.items()}
        return
    try:
        report.versions = contracts.record_versions(engine, digests)
    except (OperationalError, ProgrammingError) as exc:
        raise GatewayError(
            "gateway: cannot record contract versions (is the database migrated? run "
            f"`draftgate migrate`): {type(exc).__name__}"
        ) from None
    for action in writes:
        type(action).contract_version = report.versions[action.name]


def join_gateway(
    registry: ActionRegistry,
    path: Path,
    policies: dict[str, PolicyConfig],
    engine: Engine | None,
) -> ActionRegistry:
    """The registry with the gateway's actions added; GatewayError naming every problem."""
    report = build_gateway(
        path, reserved=[action.name for action in registry], policies=policies, engine=engine
    )
    raise_for_problems(report)
    for warning in report.warnings:
        logger.warning("gateway: %s", warning)
    for namespace, tools in sorted(report.undeclared.items()):
        logger.warning(
            "gateway: upstream %s has tools nobody declared (not exposed): %s",
            namespace,
            ", ".join(tools),
        )
    return build_registry([*registry, *report.actions])
