"""B2 approve → executed: from the execute request to the recorded ``succeeded``, against a
bare Celery ``delay().get()`` of the same shop write on the same broker.

    python bench/b2_execute.py [--quick] [--kind embedded|redis|all]

Per kind (``redis``: PostgreSQL + Redis; ``embedded``: SQLite + the SQLite broker):

- draftgate: drafts proposed and approved (signed) beforehand, outside the timing; then, one
  at a time, ``POST /v1/drafts/{id}/execute`` with the approver's token, until the
  execution's recorded ``finished_at`` (the moment the worker recorded ``succeeded``);
- bare Celery: ``delay().get()`` of a task doing the same refund write to the same database,
  its worker a real process on the same broker (its own queue). On the embedded broker it
  is measured twice: with kombu's stock SQLAlchemy transport (what bare Celery gives you)
  and with draftgate's commit-woken one (``service.executions.sqlite_broker``); quick mode
  measures the latter only.

Nothing is discarded; the first call after readiness is reported on its own (``first_ms``)
and left out of p50/p99, which cover the calls after it.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import percentile, print_table, quick_parser, ratio, write_json
from bench.execution_stack import KINDS, DraftgateStack, bare_celery, draftgate_stack

CALLS = {"quick": 6, "full": 100}


def measure_draftgate(stack: DraftgateStack, count: int) -> dict[str, Any]:
    drafts = stack.approved_drafts(count)
    latencies: list[float] = []
    phases: dict[str, list[float]] = {"request": [], "hand-off": [], "run": []}
    errors: dict[str, int] = {}
    for draft_id in drafts:
        started = datetime.now(UTC)
        try:
            execution_id = stack.request_execution(draft_id)
            answered = datetime.now(UTC)
            status, finished_at = stack.wait_finished(execution_id)
        except (AssertionError, TimeoutError) as exc:
            kind = type(exc).__name__
            errors[kind] = errors.get(kind, 0) + 1
            continue
        if status != "succeeded":
            errors[status] = errors.get(status, 0) + 1
            continue
        latencies.append((finished_at - started).total_seconds())
        claimed = stack.attempt_started(execution_id) or finished_at
        phases["request"].append((answered - started).total_seconds())
        phases["hand-off"].append((claimed - answered).total_seconds())
        phases["run"].append((finished_at - claimed).total_seconds())
    figures = summary(latencies, errors)
    # Where the time goes (p50 of the calls after the first): the execute request as the
    # approver sees it, from its answer to the worker's claim, and the claim to succeeded.
    figures["phases_first_ms"] = {
        name: round(values[0] * 1000, 3) if values else None for name, values in phases.items()
    }
    figures["phases_p50_ms"] = {
        name: round(percentile(values[1:], 50) * 1000, 3) if len(values) > 1 else None
        for name, values in phases.items()
    }
    return figures


def measure_bare(round_trip: Callable[[int], str], count: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    # Amounts above draftgate's (1..count): every refund is a new one.
    for cents in range(count + 1, 2 * count + 1):
        started = time.perf_counter()
        try:
            round_trip(cents)
        except Exception as exc:  # counted, as every bench counts failures
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            continue
        latencies.append(time.perf_counter() - started)
    return summary(latencies, errors)


def summary(latencies: list[float], errors: dict[str, int]) -> dict[str, Any]:
    """The first call on its own, p50/p99 of the rest (nothing discarded)."""
    first, rest = (latencies[0], latencies[1:]) if latencies else (None, [])
    return {
        "calls": len(latencies),
        "first_ms": None if first is None else round(first * 1000, 3),
        "p50_ms": round(percentile(rest, 50) * 1000, 3) if rest else None,
        "p99_ms": round(percentile(rest, 99) * 1000, 3) if rest else None,
        "max_ms": round(max(rest) * 1000, 3) if rest else None,
        "errors": errors,
        "error_total": sum(errors.values()),
    }


def run_kind(kind: str, count: int, workdir: Path, *, stock: bool = True) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with draftgate_stack(kind, workdir) as stack:
        draftgate = measure_draftgate(stack, count)
        baselines: list[tuple[str, dict[str, Any]]] = []
        variants = [("kombu's stock transport", False)] if stock else []
        variants.append(("draftgate's transport", True))
        for label, doorbell in variants if kind == "embedded" else [("", False)]:
            with bare_celery(stack, workdir, doorbell=doorbell) as bare:
                name = f"bare Celery ({label})" if label else "bare Celery"
                baselines.append((name, measure_bare(bare.round_trip, count)))
        baseline = baselines[-1][1]  # the same transport draftgate uses
        for name, figures in baselines:
            rows.append({"kind": kind, "name": name, **figures, "ratio": None})
        rows.append(
            {
                "kind": kind,
                "name": "draftgate execute → succeeded",
                **draftgate,
                "ratio": _round(ratio(draftgate["p50_ms"], baseline["p50_ms"])),
            }
        )
    return rows


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


COLUMNS = [
    ("kind", "broker"),
    ("name", "name"),
    ("calls", "calls"),
    ("first_ms", "first ms"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("error_total", "errors"),
    ("ratio", "p50 vs bare (same transport)"),
]


def main() -> None:
    parser = quick_parser(__doc__ or "")
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    parser.add_argument("--keep", metavar="DIR", help="keep state and logs under DIR")
    args = parser.parse_args()
    count = CALLS[args.mode]
    kinds = KINDS if args.kind == "all" else (args.kind,)
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix=f"b2-{kind}-", dir=args.keep) as workdir:
            # Quick mode leaves out kombu's stock transport (1 s a call, and one more worker).
            rows.extend(run_kind(kind, count, Path(workdir), stock=not args.quick))
            if args.keep:
                shutil.copytree(workdir, Path(args.keep) / f"b2-{kind}", dirs_exist_ok=True)
    print_table("B2 approve → executed (sequential, one worker)", rows, COLUMNS)
    for item in rows:
        if "phases_p50_ms" in item:
            print(
                f"{item['kind']}: draftgate phases, ms: first {item['phases_first_ms']}, "
                f"then p50 {item['phases_p50_ms']}"
            )
    path = write_json(
        "b2_execute",
        {"mode": args.mode, "calls_per_series": count, "rows": rows},
        args.json,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
