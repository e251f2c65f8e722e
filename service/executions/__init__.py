"""Executions: running an approved draft exactly once, via an outbox and a worker (DESIGN.md §5)."""
