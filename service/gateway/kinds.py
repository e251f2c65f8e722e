"""The registry of upstream kinds: what can stand behind the gateway.

A kind is a declaration model (an ``UpstreamDeclaration``: one entry of the gateway file,
under its ``section``) and a builder (that entry's checked actions, written into a
``Build``), and nothing else: the file's format, the naming rule, the checks of every
declaration and the contract versions are the same for every kind. A module of
``KIND_MODULES`` lists its kinds in ``KINDS``, as an action module lists ``ACTIONS``:

- ``service.gateway.mcp``: MCP servers over stdio and over streamable HTTP (``mcp:``, told
  apart by ``transport``);
- ``service.gateway.http``: operations of a REST API (``http:``).

A new kind is a new module here (or a new model with its ``transport`` in a section that
has one), never another branch in the code that loads or builds the file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar

from service.gateway import naming
from service.gateway.declarations import ToolDeclaration, UpstreamDeclaration
from service.gateway.errors import GatewayError
from service.gateway.where import Where
from service.policies.schemas import PolicyConfig
from service.registry.base import Action

KIND_MODULES = ("service.gateway.mcp", "service.gateway.http")
D = TypeVar("D", bound=UpstreamDeclaration)


@dataclass
class GatewayReport:
    """What a build found: actions, upstream tools nobody declared, and problems."""

    actions: list[Action] = field(default_factory=list)
    undeclared: dict[str, list[str]] = field(default_factory=dict)  # namespace → tool names
    problems: list[str] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)  # write action → contract_version
    warnings: list[str] = field(default_factory=list)  # served, but an operator should look


@dataclass(frozen=True)
class DeclaredTool:
    """One declared tool of an entry: its key (the upstream's own name), its declaration,
    its action name by the naming rule, and where it is declared."""

    key: str
    declaration: ToolDeclaration
    name: str
    where: Where
    namespace: str


@dataclass
class Build:
    """What a builder gets for one entry: where it is, what the build needs to know, and
    the report its actions, problems and warnings go to."""

    where: Where
    report: GatewayReport
    policies: Mapping[str, PolicyConfig] = field(default_factory=dict)
    refresh: bool = False  # re-read upstream catalogues instead of using cached ones

    def tools(self, entry: UpstreamDeclaration) -> Iterator[DeclaredTool]:
        """The entry's declared tools, each named by ``service.gateway.naming`` (the file's
        check refused every name the rule cannot give)."""
        for key, declaration in entry.declared().items():
            name = naming.action_name(entry.namespace, key)
            where = self.where / entry.tools_key / key
            yield DeclaredTool(key, declaration, name, where, entry.namespace)

    def add(self, action: Action) -> None:
        self.report.actions.append(action)

    def refuse(self, error: GatewayError) -> None:
        self.report.problems += error.problems

    def problem(self, where: Where, problem: str) -> None:
        self.report.problems.append(f"{where}: {problem}")

    def warn(self, where: Where, warning: str) -> None:
        self.report.warnings.append(f"{where}: {warning}")


@dataclass(frozen=True)
class UpstreamKind(Generic[D]):
    """One kind of upstream: its declaration model and its builder."""

    declaration: type[D]
    build: Callable[[D, Build], None]


@cache
def kinds() -> tuple[UpstreamKind[Any], ...]:
    """Every registered kind, checked: a declaration model belongs to one kind, and kinds
    that share a section are told apart by one discriminator."""
    found: list[UpstreamKind[Any]] = []
    for module in KIND_MODULES:
        found += importlib.import_module(module).KINDS
    models = [kind.declaration for kind in found]
    if len(set(models)) != len(models):
        raise RuntimeError("an upstream declaration model is registered twice")
    for section, members in sections(found).items():
        if len(members) > 1 and len({m.discriminator for m in members} - {None}) != 1:
            raise RuntimeError(f"the kinds of {section}: share no discriminator")
    return tuple(found)


def sections(
    registered: tuple[UpstreamKind[Any], ...] | list[UpstreamKind[Any]],
) -> dict[str, list[type[UpstreamDeclaration]]]:
    """The file's sections and the declaration models each may hold, in registry order."""
    found: dict[str, list[type[UpstreamDeclaration]]] = {}
    for kind in registered:
        found.setdefault(kind.declaration.section, []).append(kind.declaration)
    return found


def build_entry(entry: UpstreamDeclaration, build: Build) -> None:
    """Build one entry of the file with its kind's builder."""
    kind = next(k for k in kinds() if type(entry) is k.declaration)
    kind.build(entry, build)
