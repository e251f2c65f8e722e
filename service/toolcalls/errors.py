"""Errors of the agent's tool catalogue."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

UNKNOWN_TOOL = ErrorCode(
    "UNKNOWN_TOOL",
    Category.INVALID_ARGUMENT,
    "The agent called a tool the catalogue does not offer (writes exist only as propose_*).",
    "Call one of the tools listed by tools/list; writes are only available as propose_* tools.",
)


def unknown_tool(name: str) -> DomainError:
    return UNKNOWN_TOOL(f"There is no tool named {name[:64]!r}.")  # bounded: caller-chosen
