"""The gateway file (``DRAFTGATE_GATEWAY_FILE``): upstream MCP servers and REST APIs.

YAML, read with the safe loader, bounded (size, nesting, values, no alias cycles); every
error names ``<file>:<line>: <path>: <problem>`` (lines from the composed nodes' marks).
Its sections are those of the registered upstream kinds (``service.gateway.kinds``). What
the file alone decides is checked here, before any upstream is asked: the models, the
naming rule (``service.gateway.naming``) and that each write's timeout fits an execution.
The format is documented in docs/gateway.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model

from service.gateway import naming
from service.gateway.declarations import Declared, UpstreamDeclaration
from service.gateway.errors import GatewayError
from service.gateway.kinds import kinds, sections
from service.gateway.where import Path as Location
from service.gateway.where import Where, dotted

MAX_FILE_BYTES = 1_000_000
MAX_NODES = 100_000  # aliases can make a small file expand without bound
MAX_DEPTH = 64  # nesting of mappings and lists (a declared input schema nests the most)
# Of the execution task's soft time limit, what an attempt may spend waiting on an
# upstream; the rest is the attempt's own database work (the lock, the checks, the record).
UPSTREAM_SHARE_OF_TASK_LIMIT = 0.9
E = TypeVar("E", bound=UpstreamDeclaration)


@dataclass(frozen=True)
class GatewayFile:
    """The gateway file, validated: each entry with where it is in the file."""

    where: Where  # the file itself; ``where / "mcp" / 0`` is its first MCP entry
    entries: tuple[tuple[UpstreamDeclaration, Where], ...]

    def of(self, model: type[E]) -> list[E]:
        return [entry for entry, _ in self.entries if isinstance(entry, model)]


class _Document(Declared):
    version: Literal[1]


@cache
def _document_model() -> type[BaseModel]:
    """The file's model: ``version`` and a list for each section the kinds declare."""
    fields: dict[str, Any] = {}
    for section, models in sections(kinds()).items():
        member: Any = models[0]
        if len(models) > 1:
            member = Annotated[Union[tuple(models)], Field(discriminator=models[0].discriminator)]  # noqa: UP007
        fields[section] = (list[member], Field(default_factory=list))
    model: type[BaseModel] = create_model("GatewayDocument", __base__=_Document, **fields)
    return model


def load_gateway_file(
    path: Path, *, reserved: Iterable[str] = (), wait_budget: float | None = None
) -> GatewayFile:
    """Read and check the gateway file; GatewayError naming every problem's line.

    ``reserved`` are action names already taken; ``wait_budget`` how long an execution
    attempt may wait on an upstream (``service.gateway.build.wait_budget``), None: unchecked.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GatewayError(f"{path}:1: (file): cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise GatewayError(f"{path}:1: (file): larger than {MAX_FILE_BYTES} bytes")
    text = raw.decode("utf-8", errors="replace")
    return parse_gateway_text(text, name=str(path), reserved=reserved, wait_budget=wait_budget)


def parse_gateway_text(
    text: str, *, name: str, reserved: Iterable[str] = (), wait_budget: float | None = None
) -> GatewayFile:
    """The gateway file's text, checked (see ``load_gateway_file``); ``name`` is what errors
    call the file."""
    root = _compose(text, name)
    lines: dict[Location, int] = {}
    data = _Converter(name, lines).convert(root, ())
    where = Where(name, (), lines)
    try:
        document = _document_model().model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = [_problem(where, data, e) for e in errors if not _shadowed(e, errors)]
        raise GatewayError(*dict.fromkeys(problems)) from None
    declared = GatewayFile(where, tuple(_entries(document, where)))
    problems = [
        *_namespace_problems(declared),
        *_name_problems(declared, frozenset(reserved)),
        *_timeout_problems(declared, wait_budget),
    ]
    if problems:
        raise GatewayError(*problems)
    return declared


def _entries(document: BaseModel, where: Where) -> Iterator[tuple[UpstreamDeclaration, Where]]:
    for section in sections(kinds()):
        for index, entry in enumerate(getattr(document, section)):
            yield entry, where / section / index


def _namespace_problems(declared: GatewayFile) -> Iterator[str]:
    seen: dict[str, Where] = {}
    for entry, where in declared.entries:
        first = seen.setdefault(entry.namespace, where)
        if first is not where:
            yield (
                f"{where / 'namespace'}: {entry.namespace!r} is already the namespace of "
                f"{dotted(first.path)} (line {first.line}); each upstream needs its own"
            )


def _name_problems(declared: GatewayFile, reserved: frozenset[str]) -> Iterator[str]:
    """The naming rule, for every declared tool: a usable name, none taken twice."""
    for entry, where in declared.entries:
        names: dict[str, Where] = {}
        for tool in entry.declared():
            at = where / entry.tools_key / tool
            try:
                name = naming.action_name(entry.namespace, tool)
            except naming.NameRefused as refused:
                yield f"{at}: {refused}"
                continue
            problem = naming.taken(name, reserved)
            first = names.setdefault(name, at)
            if first is not at:
                problem = (
                    f"it maps to {name}, as {first.path[-1]!r} (line {first.line}) does; "
                    "an agent could not tell the two apart (declare one of them)"
                )
            if problem is not None:
                yield f"{at}: {problem}"


def _timeout_problems(declared: GatewayFile, wait_budget: float | None) -> Iterator[str]:
    """A write's upstream calls end within the execution task's time limit, or its soft
    limit would cut them and the retry would call again (exactly-once then rests on the
    upstream alone). See docs/decisions/gateway-timeout-within-task-limit.md."""
    if wait_budget is None:
        return
    for entry, where in declared.entries:
        writes = any(tool.kind == "write" for tool in entry.declared().values())
        if not writes or entry.wait_seconds() <= wait_budget:
            continue
        longest = max(math.floor(entry.longest_timeout(wait_budget) * 10) / 10, 0)
        written = "" if "timeout_seconds" in entry.model_fields_set else " (the default)"
        formula = "timeout" + (
            f" + {entry.call_overhead_seconds:g} s" if entry.call_overhead_seconds else ""
        )
        if entry.calls() > 1:
            formula = f"{entry.calls()} x ({formula})"
        yield (
            f"{where / 'timeout_seconds'}: {entry.timeout_seconds:g} s{written} does not fit "
            f"an execution: a write waits on this upstream up to {entry.wait_seconds():g} s "
            f"({formula}), an execution attempt {wait_budget:g} s at most "
            f"({UPSTREAM_SHARE_OF_TASK_LIMIT:.0%} of the task's soft time limit, 0.8 x "
            f"DRAFTGATE_EXECUTION_LEASE_SECONDS); use at most {longest:g} s, or raise "
            "DRAFTGATE_EXECUTION_LEASE_SECONDS"
        )


# --- YAML -------------------------------------------------------------------------------------


def _compose(text: str, name: str) -> yaml.Node:
    """The YAML node graph, its nesting bounded first (PyYAML composes recursively)."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    line = event.start_mark.line + 1 if event.start_mark else 1
                    raise GatewayError(f"{name}:{line}: (file): nested deeper than {MAX_DEPTH}")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise GatewayError(f"{name}:{line}: (file): not valid YAML: {problem}") from None
    if root is None:
        raise GatewayError(f"{name}:1: (file): the file is empty")
    return root


class _Converter:
    """YAML nodes to plain data, noting each value's line; duplicate keys, alias cycles and
    nesting (aliases included) beyond MAX_DEPTH are errors."""

    def __init__(self, name: str, lines: dict[Location, int]) -> None:
        self.name = name
        self.lines = lines
        self.nodes = 0
        self.open: set[int] = set()  # the collections being converted: an alias to one loops
        self.scalars = yaml.constructor.SafeConstructor()

    def convert(self, node: yaml.Node, path: Location) -> Any:
        self.nodes += 1
        at = f"{self.name}:{node.start_mark.line + 1}: {dotted(path) or '(file)'}"
        if self.nodes > MAX_NODES:
            raise GatewayError(f"{at}: more than {MAX_NODES} values (aliases count each use)")
        if len(path) > MAX_DEPTH:
            raise GatewayError(f"{at}: nested deeper than {MAX_DEPTH}")
        self.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.CollectionNode):
            return self.scalars.construct_object(node)
        if id(node) in self.open:
            raise GatewayError(f"{at}: an alias to a value that contains it (a cycle)")
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, path: Location) -> dict[str, Any]:
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


# --- validation errors ------------------------------------------------------------------------


def _shadowed(error: Any, errors: list[Any]) -> bool:
    """A ``str | SecretRef`` value that is a mapping fails as "not a string" too; the
    SecretRef member's own errors say what is wrong with it."""
    loc = error["loc"]
    if not loc or loc[-1] != "str":
        return False
    return any(other["loc"][: len(loc) - 1] == loc[:-1] and other is not error for other in errors)


def _problem(where: Where, data: Any, error: Any) -> str:
    """One validation error as ``<file>:<line>: <path>: <problem>``. Union members add
    their type or tag to pydantic's location (``str``, ``SecretRef``, ``stdio``): only parts
    the file has are kept, plus the missing or unknown key itself."""
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
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key"
    elif error["type"] == "missing":
        message = "required"
    elif error["type"] in ("union_tag_not_found", "union_tag_invalid"):
        context = error.get("ctx") or {}
        location.append(str(context.get("discriminator", "")).strip("'"))
        message = f"must be one of {context.get('expected_tags', '')}".rstrip()
        if error["type"] == "union_tag_not_found":
            message = "required"
    return f"{Where(where.file, tuple(location), where.lines)}: {message}"
