"""The tests' one axis, the backend (harness/settings.py): ``sqlite`` (the embedded kind) or
``postgresql`` (PostgreSQL + Redis for a stack).

Every test runs on SQLite unless it says otherwise: the root conftest's module-scoped
``backend`` fixture is "sqlite" when not parametrised, and ``db_url``, ``stack_settings``
and the modules' hosts all follow it. Where PostgreSQL's semantics matter (locks,
concurrency, SKIP LOCKED, upserts, JSON, sequences, timestamps as stored), a test or a
whole module (``pytestmark = both_backends``) runs on both, or on PostgreSQL alone
(``postgresql_only``); the mark closest to the test wins, so a module on both backends can
keep one test on one. The conftest marks every test that runs on PostgreSQL ``postgres``,
so ``pytest -m postgres`` is the PostgreSQL subset.

Being module-scoped, the parameter groups a module's tests by backend: all its SQLite
tests, then all its PostgreSQL ones, each group on one set of module-kept hosts.
"""

from __future__ import annotations

import pytest

from harness.settings import BACKENDS

both_backends = pytest.mark.backends(*BACKENDS)
postgresql_only = pytest.mark.backends("postgresql")
sqlite_only = pytest.mark.backends("sqlite")


def parametrize(metafunc: pytest.Metafunc) -> None:
    """``pytest_generate_tests``: the backends the closest ``backends`` mark names."""
    if "backend" not in metafunc.fixturenames:
        return
    if any(
        mark.args and mark.args[0] == "backend"
        for mark in metafunc.definition.iter_markers("parametrize")
    ):
        return  # parametrised by hand: @pytest.mark.parametrize("backend", [...], indirect=True)
    mark = metafunc.definition.get_closest_marker("backends")
    if mark is not None:
        metafunc.parametrize("backend", list(mark.args), indirect=True, scope="module")
