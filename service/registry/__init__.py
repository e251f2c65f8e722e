"""The action registry: every capability an agent can read or propose."""
