"""Test helpers: real databases, real servers, real MCP clients."""
