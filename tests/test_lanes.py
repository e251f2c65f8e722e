"""The two lanes cover the suite (docs/decisions/test-lanes.md): every test runs in the fast
lane (``./run test``) or the full one (``./run test --all``, which runs them all), and the fast
lane keeps a test of every test directory.

It collects the whole suite in a subprocess (tens of seconds), so it is in the full lane."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.lanes import REPORT

pytestmark = pytest.mark.full

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every test of the suite, with the lanes that run it (the conftest's own rule)."""
    report = tmp_path_factory.mktemp("lanes") / "collected.json"
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-p", "tests.support.lanes"],
        cwd=ROOT,
        env={**os.environ, REPORT: str(report)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tests: list[dict[str, Any]] = json.loads(report.read_text())
    return tests


def lane(collected: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [test for test in collected if name in test["lanes"]]


def test_every_test_runs_in_a_lane_and_the_full_lane_runs_them_all(collected):
    everything = {test["nodeid"] for test in collected}
    fast = {test["nodeid"] for test in lane(collected, "fast")}
    full = {test["nodeid"] for test in lane(collected, "full")}
    assert fast | full == everything
    assert full == everything
    assert fast < everything, "some tests are for the full lane only"


def test_the_fast_lane_has_a_test_of_every_test_directory(collected):
    directories = {str(Path(test["path"]).parent) for test in collected}
    covered = {str(Path(test["path"]).parent) for test in lane(collected, "fast")}
    assert sorted(directories - covered) == []
