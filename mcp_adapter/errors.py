"""Map domain errors to MCP tool errors the model can read."""

from __future__ import annotations

import json

from mcp.server.mcpserver.exceptions import ToolError

from service.errors import Category, DomainError


def tool_error(error: DomainError) -> ToolError:
    """A ToolError whose text is exactly the structured error object of DESIGN.md §6.

    Only ToolError messages reach the model (anything else becomes a bare
    "Error executing tool"), so every refusal is raised as one.
    """
    return ToolError(json.dumps(error.to_dict(), ensure_ascii=False))


def internal_error() -> DomainError:
    return DomainError(
        "INTERNAL_ERROR",
        Category.TRANSIENT,
        "The server failed to handle this call. Nothing was changed.",
        suggested_action="Retry once; if it fails again, tell the user the system has a problem.",
    )
