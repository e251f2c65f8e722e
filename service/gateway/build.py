"""The gateway file, turned into checked actions (at start-up and by ``draftgate gateway``).

The file is loaded and checked on its own first (``config``: models, the naming rule,
timeouts); then each entry is built by its kind's builder (``kinds``: an MCP server's
catalogue is read and checked against the declarations, a REST API's operations against
their schemas). Every problem is collected, so one run names them all. Write actions then
get their contract_version from the database (``contracts``): a changed schema or
declaration is a new version.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError, ProgrammingError

from service.canonical import canonical_json, sha256_hex
from service.config import Settings
from service.gateway import contracts
from service.gateway.actions import GatewayRead, GatewayWrite
from service.gateway.config import UPSTREAM_SHARE_OF_TASK_LIMIT, GatewayFile, load_gateway_file
from service.gateway.errors import GatewayError
from service.gateway.kinds import Build, GatewayReport, build_entry
from service.gateway.paths import parse_path
from service.policies.schemas import PolicyConfig
from service.registry.base import WriteAction
from service.registry.loader import ActionRegistry, build_registry
from service.validation import input_schema

logger = logging.getLogger(__name__)


def wait_budget(settings: Settings) -> float:
    """How long one execution attempt may wait on an upstream: a write whose timeout does
    not fit is refused at load (docs/decisions/gateway-timeout-within-task-limit.md)."""
    return UPSTREAM_SHARE_OF_TASK_LIMIT * settings.execution_soft_time_limit()


def build_gateway(
    path: Path,
    *,
    reserved: Iterable[str] = (),
    policies: Mapping[str, PolicyConfig] | None = None,
    engine: Engine | None = None,
    refresh: bool = False,
    budget: float | None = None,
) -> GatewayReport:
    """Every action the gateway file declares, checked; see ``GatewayReport``.

    ``reserved`` are names already taken (the shop's actions); ``policies`` the configured
    approval policies (a write whose policy has amount tiers must say where its money is);
    ``engine`` records contract versions (without one every write keeps its declared base);
    ``budget`` is ``wait_budget(settings)`` (None: timeouts unchecked). A problem of the
    file alone raises GatewayError; one found building its entries is in the report.
    """
    declared = load_gateway_file(path, reserved=reserved, wait_budget=budget)
    report = build_declared(declared, policies=policies or {}, refresh=refresh)
    if report.problems:
        return report
    _contract_versions(report, engine, declared)
    return report


def build_declared(
    declared: GatewayFile,
    *,
    policies: Mapping[str, PolicyConfig] | None = None,
    refresh: bool = False,
) -> GatewayReport:
    """The actions of every entry of a loaded file, each built by its kind's builder."""
    report = GatewayReport()
    for entry, where in declared.entries:
        build_entry(entry, Build(where, report, policies or {}, refresh))
    _link_sources(report)
    return report


def _link_sources(report: GatewayReport) -> None:
    """Give each write that declares a source the read answering it: a read declared on the
    same upstream, taking the arguments named, from arguments the write has."""
    actions = {action.name: action for action in report.actions}
    for write in report.actions:
        if not isinstance(write, GatewayWrite) or write.source_declaration is None:
            continue
        declared, where = write.source_declaration, f"{write.declared_at} / source"
        read = actions.get(write.source_read_name or "")
        if not isinstance(read, GatewayRead):
            report.problems.append(
                f"{where}: {declared.read!r} is not a read declared on the same upstream"
            )
            continue
        unknown = sorted(set(declared.arguments) - _names(read.Input))
        missing = sorted(
            path
            for path in declared.arguments.values()
            if str(parse_path(path, wildcards=False)[0]) not in _names(write.Input)
        )
        if unknown or missing:
            report.problems.append(
                f"{where}: the read takes no argument {', '.join(map(repr, unknown))}"
                if unknown
                else f"{where}: the write has no argument {', '.join(map(repr, missing))}"
            )
            continue
        type(write).source_read = read


def _names(model: type[BaseModel]) -> set[str]:
    """A model's field names and their aliases (a gateway model keeps the upstream's)."""
    fields = model.model_fields
    return set(fields) | {field.alias for field in fields.values() if field.alias}


def _fingerprint(action: WriteAction) -> str:
    """What a write's contract is: its strict input schema and its declaration."""
    body = {
        "input": input_schema(action.Input),
        "upstream_schema": getattr(action, "schema_sha256", None),
        "declaration": getattr(action, "declaration_fingerprint", None),
    }
    return sha256_hex(canonical_json(body))


def _contract_versions(report: GatewayReport, engine: Engine | None, file: GatewayFile) -> None:
    writes = [a for a in report.actions if isinstance(a, WriteAction)]
    digests = {a.name: (_fingerprint(a), type(a).contract_version) for a in writes}
    if engine is None or not digests:
        report.versions = {name: base for name, (_, base) in digests.items()}
        return
    try:
        report.versions = contracts.record_versions(engine, digests)
    except (OperationalError, ProgrammingError) as exc:
        raise GatewayError(
            f"{file.where}: cannot record the contract versions of its writes (is the "
            f"database migrated? run `draftgate migrate`): {type(exc).__name__}"
        ) from None
    for action in writes:
        type(action).contract_version = report.versions[action.name]


def join_gateway(
    registry: ActionRegistry,
    settings: Settings,
    policies: Mapping[str, PolicyConfig],
    engine: Engine | None,
) -> ActionRegistry:
    """The registry with the gateway's actions added; GatewayError naming every problem."""
    assert settings.gateway_file is not None
    report = build_gateway(
        settings.gateway_file,
        reserved=[action.name for action in registry],
        policies=policies,
        engine=engine,
        budget=wait_budget(settings),
    )
    if report.problems:
        raise GatewayError(*report.problems)
    for warning in report.warnings:
        logger.warning("gateway: %s", warning)
    for namespace, tools in sorted(report.undeclared.items()):
        logger.warning(
            "gateway: upstream %s has tools nobody declared (not exposed): %s",
            namespace,
            ", ".join(tools),
        )
    return build_registry([*registry, *report.actions])
