"""The gateway's one naming rule: the names agents see for the tools of an upstream.

An upstream names its tools with any valid MCP tool name: 1 to 128 letters, digits, ``_``,
``-`` and ``.`` (npm's server-everything has ``get-sum``). An action's name is
lower_snake_case of at most ``MAX_ACTION_NAME`` characters (the registry's rule, for every
action), so a declared tool ``<tool>`` of the upstream ``<namespace>`` becomes the action
``<namespace>_<mapped tool>``:

1. a ``_`` goes between a lowercase letter or a digit and the capital letter after it
   (``getSum`` → ``get_Sum``);
2. every letter is lowercased;
3. ``-`` and ``.`` become ``_``; nothing else changes (no runs are merged, nothing is cut).

Agents see a read under that name and a write only as ``propose_<namespace>_<mapped>``,
at most 8 + 49 = 57 characters: a valid MCP tool name itself. Refused at start, naming the
line: a name that is no MCP tool name, a result longer than ``MAX_ACTION_NAME``, two tools
of one upstream that map to the same name (``get-sum`` and ``get_sum``), and a name that
another action (the shop's, a module's) or the catalog (``get_draft``) already has.
Namespaces hold no ``_``, so two namespaces can never map to one name; ``propose`` is no
namespace (its reads would look like proposals).
"""

from __future__ import annotations

import re

from service.registry.loader import ACTION_NAME, MAX_ACTION_NAME, PROPOSE_PREFIX, RESERVED_NAMES

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # MCP's tool names (specification 2025-11-25)
NAMESPACE_PATTERN = r"^[a-z][a-z0-9]{1,20}$"
RESERVED_NAMESPACES = frozenset({PROPOSE_PREFIX.rstrip("_")})
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class NameRefused(ValueError):
    """The tool name cannot be served under the rule; the message says why."""


def mapped(tool: str) -> str:
    """The tool name as the part of an action name: ``get-sum`` → ``get_sum``."""
    return _CAMEL_HUMP.sub("_", tool).lower().replace("-", "_").replace(".", "_")


def action_name(namespace: str, tool: str) -> str:
    """``everything`` + ``get-sum`` → ``everything_get_sum``; NameRefused when ``tool`` is
    no MCP tool name or the result is longer than an action name may be."""
    if not TOOL_NAME.fullmatch(tool):
        raise NameRefused(
            f"{tool[:140]!r} is not an MCP tool name (1 to 128 letters, digits, '_', '-', '.')"
        )
    name = f"{namespace}_{mapped(tool)}"
    if len(name) > MAX_ACTION_NAME:
        raise NameRefused(
            f"it maps to {name} ({len(name)} characters); an action name has at most "
            f"{MAX_ACTION_NAME}: use a shorter namespace (or leave the tool out)"
        )
    assert ACTION_NAME.fullmatch(name), name  # the mapping makes nothing else
    return name


def taken(name: str, reserved: frozenset[str]) -> str | None:
    """Why ``name`` cannot be a gateway action's, when another action or the catalog has it."""
    if name in RESERVED_NAMES:
        return f"it maps to {name}, a tool draftgate itself offers; use another namespace"
    if name in reserved:
        return f"it maps to {name}, the name of an existing action; use another namespace"
    return None


def namespace_problem(namespace: str) -> str | None:
    if namespace in RESERVED_NAMESPACES:
        return f"{namespace!r} is not a namespace: every write is offered as propose_*"
    return None
