"""Reliability drills: draftgate on private PostgreSQL and Redis instances, with real worker
processes, while faults are injected. ``python -m reliability.drill --help``."""
