"""Map domain errors to MCP tool errors the model can read."""

from __future__ import annotations

import json

from mcp.types import CallToolResult, TextContent

from service.errors import DomainError


def as_tool_error(error: DomainError) -> CallToolResult:
    """An ``isError`` result whose text is exactly the structured error object (DESIGN.md §6).

    The text is what every MCP client shows the model; the same object is not sent as
    structured content, because that is reserved for results matching the output schema.
    """
    text = json.dumps(error.to_dict(), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
