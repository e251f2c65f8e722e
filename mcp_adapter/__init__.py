"""The agent's front door: an MCP server (official ``mcp`` SDK) built from the action registry."""
