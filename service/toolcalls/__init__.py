"""What the agent sees: the tool catalog generated from the registry, and one tool call."""
