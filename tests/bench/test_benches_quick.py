"""Every bench runs in quick mode: it finishes, prints its table and writes figures, with 0 errors.

The benches are discovered (bench/b<digit>*.py and bench/memory.py), so a new bench is covered the
day it lands. Nothing here asserts a timing: quick-mode figures on a shared CI machine are
rough, and the targets are read from the full run (docs/benchmarks.md). What is asserted
is the contract every bench keeps (bench/README.md): exit code 0, a printed table, a JSON
document with a non-empty ``rows`` list whose rows carry figures, and 0 errors (its
``error_total``, or every row's ``error_total``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.services import POSTGRES_URL, REDIS_URL
from tests.support import services

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted([*ROOT.glob("bench/b[0-9]*.py"), *ROOT.glob("bench/memory.py")])
# Quick mode aims at 10-20 s; the bound is generous because CI shares its cores.
TIMEOUT_SECONDS = 180

pytestmark = [pytest.mark.full, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="module")
def bench_env() -> dict[str, str]:
    services.require("PostgreSQL", POSTGRES_URL, 5432)
    services.require("Redis", REDIS_URL, 6379)
    # Nothing of this process's draftgate settings leaks into a bench (its servers get their
    # own); the service URLs are passed the way bench/common.py reads them.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DRAFTGATE_") or key.startswith("DRAFTGATE_TEST_")
    }
    env["DRAFTGATE_BENCH_POSTGRES_URL"] = POSTGRES_URL
    env["DRAFTGATE_BENCH_REDIS_URL"] = REDIS_URL
    return env


def test_the_benches_are_discovered() -> None:
    names = {path.name for path in BENCHES}
    assert {"b1_tools.py", "memory.py"} <= names


def _figures(item: dict[str, Any]) -> list[float]:
    return [
        value
        for key, value in item.items()
        if key != "name"
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    ]


def _error_total(document: dict[str, Any]) -> int | None:
    """The document's ``error_total``, else the sum of its rows' (each row must count)."""
    if "error_total" in document:
        return int(document["error_total"])
    counts = [item.get("error_total") for item in document["rows"]]
    if any(not isinstance(count, int) for count in counts):
        return None  # no error count at all is not "0 errors"
    return sum(counts)


@pytest.mark.parametrize("bench", BENCHES, ids=[path.stem for path in BENCHES])
def test_bench_runs_in_quick_mode(bench: Path, bench_env: dict[str, str], tmp_path: Path) -> None:
    result_file = tmp_path / f"{bench.stem}.json"
    try:
        completed = subprocess.run(
            [sys.executable, str(bench), "--quick", "--json", str(result_file)],
            cwd=tmp_path,  # a bench must not depend on the working directory
            env=bench_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{bench.name} --quick ran over {TIMEOUT_SECONDS} s:\n{expired.stderr}")
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, f"{bench.name} --quick failed:\n{output[-4000:]}"
    assert result_file.exists(), f"{bench.name} wrote no JSON to --json:\n{output[-2000:]}"
    document = json.loads(result_file.read_text())
    rows = document.get("rows")
    assert isinstance(rows, list), f"{bench.name}: no rows in {document}"
    assert rows, f"{bench.name}: no rows in {document}"
    for item in rows:
        assert item.get("name"), f"{bench.name}: a row without a name: {item}"
        assert _figures(item), f"{bench.name}: a row without figures: {item}"
    assert _error_total(document) == 0, (
        f"{bench.name}: errors in quick mode: {json.dumps(document, indent=1)[-4000:]}"
    )
    assert rows[0]["name"] in completed.stdout, f"{bench.name} printed no table:\n{output[-2000:]}"
