"""The gateway: upstream MCP servers and REST APIs declared in a file, as actions."""
