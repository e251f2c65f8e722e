"""What every gateway action is, whatever kind of upstream is behind it.

A kind's builder makes each declared tool's action with ``declared_action``: the same
title and description rules (a write's description starts by saying it only proposes),
the same contract for a write (its summary template, money and risk checked against the
input model, and the policy that needs an amount), and the same record of what an approval
of it means beyond the input schema. The kind brings its base classes (how the upstream is
called) and the attributes they need.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel

from service.canonical import canonical_json
from service.gateway import naming
from service.gateway.declarations import SourceDeclaration, ToolDeclaration, WriteContract
from service.gateway.kinds import Build, DeclaredTool
from service.gateway.paths import lookup, parse_path
from service.gateway.where import Where
from service.registry.base import (
    Action,
    ActionContext,
    Outcome,
    Preview,
    ReadAction,
    SourceFact,
    SourceState,
    WriteAction,
    digest_revision,
)
from service.text import inert
from service.validation import StrictInput, parse

MAX_TITLE = 200
MAX_DESCRIPTION = 4000
PROPOSE_NOTE = (
    "Only PROPOSES the change: it records a draft that a human must approve; nothing happens "
    "upstream until then. "
)


def arguments(params: BaseModel) -> dict[str, Any]:
    """The validated arguments under the upstream's own names (a gateway input model dumps
    by alias), omitted ones left out: what the upstream receives."""
    return params.model_dump(mode="json", exclude_none=True, by_alias=True)


class GatewayRead(ReadAction):
    """Base of every gateway read; a kind's read subclasses it with how it calls."""

    declared_at: ClassVar[str]  # <file>:<line>: <path> of its declaration
    open_world = True  # every gateway read asks an upstream system

    def masked(self, params: BaseModel) -> dict[str, Any]:
        # Declared masks name result fields, not arguments: these are recorded as given.
        return arguments(params)


class GatewayWrite(WriteAction):
    """Base of every gateway write; a kind's write subclasses it with how it calls."""

    declared_at: ClassVar[str]
    contract: ClassVar[WriteContract]
    # What an approval means beyond the input schema (a changed one is a new contract).
    declaration_fingerprint: ClassVar[dict[str, Any]]
    # Its declared source, the name of the read that answers it, and that read (linked once
    # every action of the file is built: service.gateway.build).
    source_declaration: ClassVar[SourceDeclaration | None] = None
    source_read_name: ClassVar[str | None] = None
    source_read: ClassVar[GatewayRead | None] = None
    knows_applied = False  # see applied()

    @property
    def declares_source(self) -> bool:
        return self.source_declaration is not None

    def source(self, ctx: ActionContext, params: Any, *, lock: bool = False) -> SourceState | None:
        """The record as the declared read answers it now. ``lock`` cannot hold an
        upstream's record: the comparison is made right before the call, and what happens
        upstream between the two is the upstream's (docs/gateway.md, "Sources")."""
        declared, read = self.source_declaration, self.source_read
        if declared is None:
            return None
        assert read is not None, "linked when the gateway was built"
        sent = arguments(params)
        asked = {
            name: lookup(sent, parse_path(path, wildcards=False))
            for name, path in declared.arguments.items()
        }
        answer = read.handle(
            ctx, parse(read.Input, {k: v for k, v in asked.items() if v is not None})
        )
        return source_state(read.name, asked, answer.model_dump(mode="json"), declared.select)

    def masked(self, params: BaseModel) -> dict[str, Any]:
        return arguments(params)

    def amount_of(self, params: Any) -> Any:
        return self.contract.amount_of(arguments(params))

    def preview(self, params: BaseModel) -> Preview:
        return self.contract.preview(arguments(params))

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        # An upstream cannot be asked in general whether a change was made: the repeated
        # call with the same idempotency key is how it is asked, and it dedupes (execute).
        return None


MAX_FACT = 200
MAX_REF = 200


def source_state(
    read: str, asked: dict[str, Any], answer: dict[str, Any], select: list[str]
) -> SourceState:
    """The record's state from a read's answer: the selected parts (or all of it) digested
    into the revision, each selected part a fact (bounded, inert)."""
    chosen: Any = (
        {path: lookup(answer, parse_path(path, wildcards=False)) for path in select}
        if select
        else answer
    )
    revision = digest_revision(chosen)
    facts = [SourceFact(label=path, value=_fact(chosen[path])) for path in select] or [
        SourceFact(label="state", value=f"digest {revision} of the whole answer of {read}")
    ]
    what = ", ".join(f"{name}={_fact(value)}" for name, value in sorted(asked.items()))
    return SourceState(ref=f"{read}:{what}"[:MAX_REF], revision=revision, facts=tuple(facts))


def _fact(value: Any) -> str:
    text = value if isinstance(value, str) else canonical_json(value).decode()
    return inert(text)[:MAX_FACT]


def declared_action(
    bases: tuple[type[GatewayRead], type[GatewayWrite]],
    build: Build,
    declared: DeclaredTool,
    model: type[StrictInput],
    *,
    title: str,
    description: str,
    reached: dict[str, Any],
    attributes: dict[str, Any],
) -> Action:
    """The action of one declared tool: a class of the kind's read or write base, with
    ``attributes`` as its class attributes and ``model`` as its input.

    ``reached`` says where the call goes (secret references, never values); for a write it
    is part of the contract, so moving the upstream makes approvals of the old one stop
    counting. GatewayError naming the tool's line when the declaration does not fit.
    """
    read, write = bases
    name, tool, where = declared.name, declared.declaration, declared.where
    text = inert(description)
    common: dict[str, Any] = {
        "name": name,
        "kind": tool.kind,
        "contract_version": tool.contract_version,
        "title": inert(title)[:MAX_TITLE],
        "description": text[:MAX_DESCRIPTION],
        "Input": model,
        "declared_at": str(where),
        **attributes,
    }
    if tool.kind == "read":
        return type(f"{read.__name__}_{name}", (read,), common)()  # type: ignore[no-any-return]
    _check_policy(build, name, tool, where)
    common |= {
        "description": (PROPOSE_NOTE + text)[:MAX_DESCRIPTION],
        "contract": WriteContract(tool, model, where=where),
        "declaration_fingerprint": {**reached, **tool.terms()},
        "source_declaration": tool.source,
        "source_read_name": (
            None
            if tool.source is None
            else naming.action_name(declared.namespace, tool.source.read)
        ),
    }
    return type(f"{write.__name__}_{name}", (write,), common)()  # type: ignore[no-any-return]


def _check_policy(build: Build, name: str, tool: ToolDeclaration, where: Where) -> None:
    """A policy with amount tiers (or cumulative amounts) means nothing without the amount:
    every such draft would fall to the strictest tier without anyone noticing why."""
    policy = build.policies.get(name)
    if policy is None or tool.money is not None:
        return
    if isinstance(policy.tiers, dict) or policy.cumulative is not None:
        raise where.error(
            f"the policy of {name} has amount tiers, but the declaration names no money path "
            "(declare money: {amount_minor: ..., currency: ...})"
        )
