"""The two test lanes (docs/decisions/test-lanes.md) and what the conftest does with them.

``./run test`` is the fast lane (``--lane fast``): every test not marked ``full``.
``./run test --all`` is the full lane (``--lane full``, also plain pytest's default): every
test. A test belongs to the full lane only when it needs a browser, an npm upstream, a
``draftgate dev`` or a whole stack of subprocesses, drills, benches or fuzzing, or takes
more than a few seconds; its module (or the test) says so with ``pytest.mark.full``, and
a test that uses one of the ``FULL_FIXTURES`` (the whole stack with its worker process,
Chromium, an npm process) is marked ``full`` here, whoever wrote it.

tests/test_lanes.py proves the lanes: they cover every test, the full lane runs them all and
the fast lane has a test of every test directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

LANES = ("fast", "full")
POSTGRES_FIXTURES = {"postgres_url", "postgres_pool"}
REPORT = "DRAFTGATE_LANES_REPORT"  # where ``report`` writes what it collected
# (fixture, where the fixture the test gets is defined): what puts a test in the full lane.
FULL_FIXTURES = {
    ("stack", "tests"): "the whole stack, a worker process included (tests/conftest.py)",
    ("browser", "tests/console"): "Chromium",
    ("memory_server_command", "tests/gateway"): "npm's memory server",
    ("provider", "tests/oidc"): "npm's oidc-provider, a Node process",
}


def in_fast_lane(item: pytest.Item) -> bool:
    return item.get_closest_marker("full") is None


def selected(item: pytest.Item, lane: str) -> bool:
    """Whether ``lane`` runs this test (the conftest deselects the others)."""
    return lane == "full" or in_fast_lane(item)


def runs_on_postgresql(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("backend") == "postgresql":
        return True
    return bool(POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())))


def mark_full(items: list[pytest.Item]) -> None:
    """Mark ``full`` every test that uses one of the ``FULL_FIXTURES``."""
    for item in items:
        uses = fixtures_of(item).items()
        if item.get_closest_marker("full") is None and any(u in FULL_FIXTURES for u in uses):
            item.add_marker(pytest.mark.full)


def mark_postgres(items: list[pytest.Item]) -> None:
    """Every test that runs on PostgreSQL is marked ``postgres``: ``-m postgres`` is the
    PostgreSQL subset (of a lane, with ``--lane``)."""
    for item in items:
        if runs_on_postgresql(item) and item.get_closest_marker("postgres") is None:
            item.add_marker(pytest.mark.postgres)


def order_for_xdist(items: list[pytest.Item]) -> None:
    """Order the modules for xdist's ``loadfile`` with ``--no-loadscope-reorder`` (the
    queue is then this order): modules with full-lane tests first, the rest by size, so
    that no long module starts last and runs alone at the end. Inside a module, its
    PostgreSQL tests follow its SQLite ones (a test without a ``backend`` parameter runs on
    SQLite, and pytest does not group it with the parametrised ones), so that its stack or
    hosts of each backend start once; the order is otherwise kept."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def weight(module: list[pytest.Item]) -> tuple[bool, int]:
        return (all(in_fast_lane(item) for item in module), -len(module))

    ordered = sorted(modules.values(), key=weight)
    items[:] = [item for module in ordered for item in sorted(module, key=runs_on_postgresql)]


def fixtures_of(item: pytest.Item) -> dict[str, str]:
    """The fixtures a test uses, each with where the one it gets is defined (its baseid:
    ``tests/console`` for tests/console/conftest.py's ``browser``)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return {}
    return {name: defs[-1].baseid for name, defs in info.name2fixturedefs.items() if defs}


def pytest_collection_finish(session: pytest.Session) -> None:
    """As a plugin (``-p tests.support.lanes``, with ``DRAFTGATE_LANES_REPORT`` set): write
    what was collected, with the lanes that run each test and its fixtures, for
    tests/test_lanes.py (collected without ``--lane``: nothing is deselected)."""
    target = os.environ.get(REPORT)
    if not target:
        return
    collected = [
        {
            "nodeid": item.nodeid,
            "path": str(Path(str(item.path)).relative_to(session.config.rootpath)),
            "lanes": [lane for lane in LANES if selected(item, lane)],
            "fixtures": fixtures_of(item),
        }
        for item in session.items
    ]
    Path(target).write_text(json.dumps(collected))
