"""Shared helpers for every bench under ``bench/``: timing, figures, results and the CLI.

Import as ``from bench.common import ...`` (the project root is on ``sys.path`` in the
project's virtualenv, so ``python bench/<name>.py`` works from any directory).

The API — small and stable; other benches depend on it:

Figures
    ``percentile(values, p)``  the p-th percentile (0 to 100, linear interpolation) of values.
    ``Sample``                 latencies (seconds) of one measured series plus error counts
                               by kind; ``calls_per_s``, ``p50_ms``, ``p99_ms``, ``error_total``,
                               ``figures()`` (a JSON-ready dict), ``merge(samples)``.
    ``ratio(value, baseline)`` value / baseline, ``None`` if either is missing or baseline is 0.
    ``row(name, sample, baseline=None)``  a table/JSON row: name, calls/s, p50, p99, errors
                               and the calls/s ratio against ``baseline`` (a ``Sample``).

Timing
    ``Timer``                  ``with Timer() as t: ...`` then ``t.elapsed`` (seconds).
    ``Budget(calls, seconds)`` stop after ``calls`` calls or ``seconds``, whichever first.
    ``run_calls(call, budget, warmup=0)``  time a synchronous ``call()`` repeatedly.
    ``arun_calls(call, budget, warmup=0)`` the same for an ``async`` ``call()``.
    ``arun_sessions(calls, budget, warmup=0)``  one async ``call`` per concurrent session,
                               all sharing one ``Budget`` (split evenly); returns one merged
                               ``Sample`` whose elapsed is the wall time of the whole run.
    A call that raises is counted in ``Sample.errors`` under ``classify(exc)`` (or a call may
    raise ``CallError(kind)`` itself); errors never stop the loop.

Results and output
    ``results_path(name)``     ``bench/results/<name>.json`` (the directory is git-ignored).
    ``write_json(name, data, path=None)``  writes ``data`` plus ``machine`` and a timestamp;
                               returns the path written.
    ``machine_info()``         nproc, CPU model, RAM, load average, Python, SQLite, packages.
    ``print_table(title, rows, columns=DEFAULT_COLUMNS)``  a ``rich`` table of row dicts:
                               "name | calls/s | p50 | p99 | errors | ratio vs baseline".

Command line
    ``progress(what)``         one line on stderr with the seconds since start: where a run
                               spends its time (stdout stays the table).
    ``quick_parser(description)``  an ``argparse`` parser with ``--quick`` (CI: < 60 s) /
                               ``--full`` (the default; < 10 minutes) and ``--json PATH``
                               (where to write the result instead of ``results_path``).
                               ``args.quick`` is a bool; ``args.mode`` is "quick" or "full".

Local services (load targets 127.0.0.1 only; draftgate's processes: bench/stack.py and
harness/, the builder tests and drills start theirs with too)
    ``postgres_database(url=POSTGRES_URL)``  context manager: a private, uniquely named
                               database (``dg_bench_<hex>``) created and dropped at the end;
                               yields its SQLAlchemy URL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
POSTGRES_URL = os.environ.get(
    "DRAFTGATE_BENCH_POSTGRES_URL",
    os.environ.get(
        "DRAFTGATE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    ),
)
REDIS_URL = os.environ.get(
    "DRAFTGATE_BENCH_REDIS_URL",
    os.environ.get("DRAFTGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
)


# --- figures -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0 <= p <= 100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class CallError(Exception):
    """Raised by a measured call to count a failure under an explicit ``kind``."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


def classify(exc: BaseException) -> str:
    """The error kind a failed call is counted under."""
    if isinstance(exc, CallError):
        return exc.kind
    text = str(exc)
    if "database is locked" in text:
        return "database_locked"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int) and status >= 500:
        return "http_5xx"
    return type(exc).__name__


@dataclass
class Sample:
    """One measured series: per-call latencies (seconds), wall time and errors by kind."""

    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.elapsed if self.elapsed > 0 else math.nan

    @property
    def p50_ms(self) -> float:
        return percentile(self.latencies, 50) * 1000

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies, 99) * 1000

    @property
    def error_total(self) -> int:
        return sum(self.errors.values())

    def figures(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "elapsed_s": round(self.elapsed, 4),
            "calls_per_s": _round(self.calls_per_s),
            "p50_ms": _round(self.p50_ms, 3),
            "p99_ms": _round(self.p99_ms, 3),
            "errors": dict(self.errors),
            "error_total": self.error_total,
        }

    @staticmethod
    def merge(samples: Sequence[Sample], elapsed: float | None = None) -> Sample:
        """One sample of all calls; elapsed is the given wall time or the longest one's."""
        merged = Sample(
            elapsed=elapsed
            if elapsed is not None
            else max((s.elapsed for s in samples), default=0.0)
        )
        for sample in samples:
            merged.latencies.extend(sample.latencies)
            merged.errors.update(sample.errors)
        return merged


def ratio(value: float | None, baseline: float | None) -> float | None:
    if value is None or baseline is None or not baseline or math.isnan(value or math.nan):
        return None
    return value / baseline


def row(name: str, sample: Sample, baseline: Sample | None = None, **extra: Any) -> dict[str, Any]:
    """A result row: the sample's figures and its calls/s ratio against ``baseline``."""
    figures = sample.figures()
    ratio_value = ratio(sample.calls_per_s, baseline.calls_per_s) if baseline else None
    return {"name": name, **figures, "ratio": _round(ratio_value, 3), **extra}


def _round(value: float | None, digits: int = 2) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, digits)


# --- timing --------------------------------------------------------------------------------


class Timer:
    """``with Timer() as t: ...`` measures the block's wall time into ``t.elapsed``."""

    def __init__(self) -> None:
        self.start = 0.0
        self.elapsed = 0.0

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.elapsed = time.perf_counter() - self.start


@dataclass(frozen=True)
class Budget:
    """Stop after ``calls`` calls or ``seconds`` of wall time, whichever comes first."""

    calls: int
    seconds: float

    def split(self, parts: int) -> Budget:
        return Budget(max(1, math.ceil(self.calls / parts)), self.seconds)


def run_calls(call: Callable[[], object], budget: Budget, warmup: int = 0) -> Sample:
    """Time ``call()`` until the budget is spent; failures are counted, not raised."""
    for _ in range(warmup):
        _ignore_errors(call)
    sample = Sample()
    start = time.perf_counter()
    deadline = start + budget.seconds
    while sample.calls + sample.error_total < budget.calls and time.perf_counter() < deadline:
        began = time.perf_counter()
        try:
            call()
        except Exception as exc:
            sample.errors[classify(exc)] += 1
            continue
        sample.latencies.append(time.perf_counter() - began)
    sample.elapsed = time.perf_counter() - start
    return sample


async def arun_calls(
    call: Callable[[], Awaitable[object]], budget: Budget, warmup: int = 0
) -> Sample:
    """The async twin of ``run_calls``."""
    for _ in range(warmup):
        try:
            await call()
        except Exception:  # a warm-up failure shows again in the measured calls
            continue
    sample = Sample()
    start = time.perf_counter()
    deadline = start + budget.seconds
    while sample.calls + sample.error_total < budget.calls and time.perf_counter() < deadline:
        began = time.perf_counter()
        try:
            await call()
        except Exception as exc:
            sample.errors[classify(exc)] += 1
            continue
        sample.latencies.append(time.perf_counter() - began)
    sample.elapsed = time.perf_counter() - start
    return sample


async def arun_sessions(
    calls: Sequence[Callable[[], Awaitable[object]]], budget: Budget, warmup: int = 0
) -> Sample:
    """Run one call loop per session concurrently, the budget split evenly between them.

    Every session warms up first, then all start measuring together; calls/s is the total
    number of calls over the wall time of the measured part."""
    for call in calls:
        for _ in range(warmup):
            try:
                await call()
            except Exception:  # counted in the measured calls
                continue
    share = budget.split(len(calls))
    with Timer() as timer:
        samples = await asyncio.gather(*(arun_calls(call, share) for call in calls))
    return Sample.merge(samples, elapsed=timer.elapsed)


def _ignore_errors(call: Callable[[], object]) -> None:
    with suppress(Exception):  # a warm-up failure shows again in the measured calls
        call()


# --- results and output --------------------------------------------------------------------


def results_path(name: str) -> Path:
    return RESULTS / f"{name}.json"


PACKAGES = ("mcp", "uvicorn", "sqlalchemy", "psycopg", "celery", "kombu", "redis", "langgraph")


def machine_info() -> dict[str, Any]:
    """The machine and the versions the figures depend on (servers' versions: see docs)."""
    import sqlite3
    from importlib import metadata

    packages = {}
    for name in PACKAGES:
        with suppress(metadata.PackageNotFoundError):
            packages[name] = metadata.version(name)
    return {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "ram_gb": _ram_gb(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "packages": packages,
    }


def write_json(name: str, data: dict[str, Any], path: Path | str | None = None) -> Path:
    """Write ``data`` (plus the machine and a UTC timestamp) as JSON; returns the path."""
    target = Path(path) if path else results_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "bench": name,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        **data,
    }
    target.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return target


DEFAULT_COLUMNS: list[tuple[str, str]] = [
    ("name", "name"),
    ("calls_per_s", "calls/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("error_total", "errors"),
    ("ratio", "ratio vs baseline"),
]


def print_table(
    title: str, rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]] | None = None
) -> None:
    """Print rows (dicts) as a ``rich`` table; ``columns`` are (key, heading) pairs."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for index, (_, heading) in enumerate(columns or DEFAULT_COLUMNS):
        table.add_column(heading, justify="left" if index == 0 else "right", no_wrap=index == 0)
    for item in rows:
        table.add_row(*(_cell(item.get(key)) for key, _ in columns or DEFAULT_COLUMNS))
    console = Console()
    # Piped (CI, a log file): wide enough that no row name is wrapped or cut.
    Console(width=console.width if console.is_terminal else 200).print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"
    return str(value)


# --- command line --------------------------------------------------------------------------


_STARTED = time.monotonic()


def progress(what: str) -> None:
    print(f"[+{time.monotonic() - _STARTED:6.1f} s] {what}", file=sys.stderr, flush=True)


class _BenchParser(argparse.ArgumentParser):
    """Sets ``args.quick`` from ``args.mode`` however the arguments are parsed."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, rest = super().parse_known_args(args, namespace)
        parsed.quick = parsed.mode == "quick"
        return parsed, rest


def quick_parser(description: str) -> argparse.ArgumentParser:
    """``--quick`` / ``--full`` (default) into ``args.mode`` and ``args.quick``; ``--json``."""
    parser = _BenchParser(description=description)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="a short run for CI (under 60 s); the figures are rough",
    )
    mode.add_argument(
        "--full", dest="mode", action="store_const", const="full", help="the full run (default)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the result here instead")
    parser.set_defaults(mode="full")
    return parser


# --- local services ------------------------------------------------------------------------


@contextmanager
def postgres_database(url: str = POSTGRES_URL) -> Iterator[str]:
    """A private database on the server of ``url``, dropped (forcibly) when the block ends."""
    from harness.services import private_database

    with private_database(url, prefix="dg_bench_") as database_url:
        yield database_url


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


if __name__ == "__main__":  # pragma: no cover - a quick look at the machine
    json.dump(machine_info(), sys.stdout, indent=2)
