"""The shared bench helpers compute the figures every bench reports: they must be right."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bench.common import (
    Budget,
    CallError,
    Sample,
    arun_sessions,
    classify,
    percentile,
    quick_parser,
    ratio,
    row,
    run_calls,
    write_json,
)


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)
    assert math.isnan(percentile([], 50))


def test_a_sample_reports_rate_and_latencies_in_milliseconds() -> None:
    sample = Sample(latencies=[0.001] * 99 + [0.1], elapsed=2.0)
    assert sample.calls_per_s == 50.0
    assert sample.p50_ms == pytest.approx(1.0)
    assert sample.p99_ms == pytest.approx(1.99)
    baseline = Sample(latencies=[0.001] * 200, elapsed=2.0)
    assert row("x", sample, baseline)["ratio"] == 0.5
    assert ratio(1.0, 0.0) is None
    assert ratio(None, 1.0) is None


def test_run_calls_counts_failures_by_kind_and_keeps_going() -> None:
    calls = iter(range(10))

    def call() -> None:
        number = next(calls)
        if number % 3 == 0:
            raise CallError("tool_error:X")
        if number == 4:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")

    sample = run_calls(call, Budget(calls=10, seconds=5))
    assert sample.calls == 5
    assert dict(sample.errors) == {"tool_error:X": 4, "database_locked": 1}
    assert sample.error_total == 5


def test_concurrent_sessions_share_one_budget_and_one_wall_clock() -> None:
    async def call() -> None:
        await asyncio.sleep(0.02)

    sample = asyncio.run(arun_sessions([call] * 4, Budget(calls=40, seconds=10)))
    assert sample.calls == 40
    # Four sessions in parallel: about 10 rounds of 20 ms (0.2 s), where one after the
    # other would take 40 (0.8 s).
    assert sample.elapsed < 0.6
    assert sample.calls_per_s > 40 / 0.6


def test_classify_names_server_errors() -> None:
    class Response:
        status_code = 503

    class HTTPError(Exception):
        response = Response()

    assert classify(HTTPError("boom")) == "http_5xx"
    assert classify(ValueError("x")) == "ValueError"


def test_quick_and_full_modes() -> None:
    parser = quick_parser("demo")
    assert parser.parse_args([]).mode == "full"
    assert parser.parse_args([]).quick is False
    quick = parser.parse_args(["--quick", "--json", "out.json"])
    assert (quick.mode, quick.quick, quick.json) == ("quick", True, "out.json")
    with pytest.raises(SystemExit):
        parser.parse_args(["--quick", "--full"])


def test_write_json_adds_the_machine(tmp_path: Path) -> None:
    path = write_json("demo", {"rows": [{"name": "a", "calls_per_s": 1.0}]}, tmp_path / "d.json")
    document = json.loads(path.read_text())
    assert document["bench"] == "demo"
    assert document["machine"]["nproc"] >= 1
    assert document["rows"] == [{"name": "a", "calls_per_s": 1.0}]
