"""Reliability drills: draftgate on private PostgreSQL and Redis instances, with real worker
processes, while faults are injected (``python -m reliability.drill --help``), and the
multi-replica production topology under load (``python -m reliability.topology --help``)."""
