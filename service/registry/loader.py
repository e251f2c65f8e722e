"""Load actions from the modules named in settings and check their declarations."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from service.registry.base import Action, ReadAction, WriteAction

MAX_ACTION_NAME = 49  # characters; the tables keep 64, and propose_<name> stays short
ACTION_NAME = re.compile(rf"[a-z][a-z0-9_]{{1,{MAX_ACTION_NAME - 1}}}")
# Names the agent-facing catalog uses for itself.
RESERVED_NAMES = frozenset({"get_draft"})
# A write is exposed to agents only as a proposal: ``propose_<name>``.
PROPOSE_PREFIX = "propose_"


def exposed_name(action: Action) -> str:
    """The tool name agents see for an action: a read's own name, ``propose_<name>`` for a
    write (the only way a write is offered)."""
    return PROPOSE_PREFIX + action.name if isinstance(action, WriteAction) else action.name


class RegistryError(RuntimeError):
    """The configured actions cannot be served; the message names every problem."""


@dataclass(eq=False)  # compared and hashed by identity: catalogs are cached per registry
class ActionRegistry:
    reads: dict[str, ReadAction] = field(default_factory=dict)
    writes: dict[str, WriteAction] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Action]:
        yield from self.reads.values()
        yield from self.writes.values()

    def write(self, name: str) -> WriteAction | None:
        return self.writes.get(name)


def load_registry(module_names: Iterable[str]) -> ActionRegistry:
    """Import each module, collect its ``ACTIONS`` and validate every declaration at once."""
    actions: list[object] = []
    problems: list[str] = []
    for module_name in module_names:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # a broken user module must not hide the other problems
            problems.append(
                f"action module {module_name!r} cannot be imported: {type(exc).__name__}: {exc}"
            )
            continue
        declared = getattr(module, "ACTIONS", None)
        if not isinstance(declared, list | tuple):
            problems.append(f"action module {module_name!r} has no ACTIONS list")
            continue
        actions.extend(declared)
    return build_registry(actions, problems=problems)


def build_registry(
    actions: Iterable[object], *, problems: list[str] | None = None
) -> ActionRegistry:
    """Validate action objects and index them by name; refuse to start on any problem."""
    problems = list(problems or [])
    registry = ActionRegistry()
    undeclared: list[str] = []
    for action in actions:
        if isinstance(action, type):
            name = getattr(action, "name", action.__name__)
            problems.append(
                f"action {name!r} ({action.__name__}) is listed as a class; list an instance"
            )
            continue
        label = str(getattr(action, "name", None) or type(action).__name__)
        kind = getattr(type(action), "kind", None)
        if kind is None:
            undeclared.append(label)
            continue
        problem = _check(action, label, kind)
        if problem:
            problems.append(problem)
        elif label in registry.reads or label in registry.writes:
            problems.append(f"action {label!r} is declared twice")
        elif isinstance(action, ReadAction):
            registry.reads[label] = action
        elif isinstance(action, WriteAction):
            registry.writes[label] = action
    if undeclared:
        problems.insert(
            0,
            'actions without an explicit kind (declare kind = "read" or kind = "write"): '
            + ", ".join(sorted(undeclared)),
        )
    if problems:
        raise RegistryError("cannot start: " + "; ".join(problems))
    return registry


def _check(action: object, label: str, kind: object) -> str | None:
    if kind not in ("read", "write"):
        return f'action {label!r} declares kind {kind!r}; it must be "read" or "write"'
    expected = ReadAction if kind == "read" else WriteAction
    if not isinstance(action, expected):
        return f"action {label!r} declares kind {kind!r} but is not a {expected.__name__}"
    if (
        not ACTION_NAME.fullmatch(label)
        or label in RESERVED_NAMES
        or label.startswith(PROPOSE_PREFIX)
    ):
        return f"action name {label!r} is not allowed (lower_snake_case, not reserved)"
    for attribute in ("contract_version", "title", "description", "Input"):
        if not hasattr(type(action), attribute):
            return f"action {label!r} does not declare {attribute}"
    if kind == "read" and not hasattr(type(action), "Output"):
        return f"read action {label!r} does not declare Output"
    return None
