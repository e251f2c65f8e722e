"""B3 execution throughput: executions/s with 2 worker processes against bare Celery doing
the same write with 2 worker processes, on PostgreSQL + Redis.

    python bench/b3_throughput.py [--quick]

draftgate: N refund drafts proposed and approved (signed) beforehand, outside the timing;
then the clock starts, every execution is requested (``POST /v1/drafts/{id}/execute`` from
a few approver threads, as a busy team would) and the clock stops when all N have recorded
``succeeded``. Bare Celery: N ``delay()`` calls of the same refund write, then every
result; the clock covers both. Both workers run ``--concurrency 2`` (prefork), and both get
the same untimed warm-up first (2 executions, 2 round trips).
"""

from __future__ import annotations

import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import Timer, print_table, quick_parser, ratio, write_json
from bench.execution_stack import POLL_SECONDS, bare_celery, draftgate_stack

COUNTS = {"quick": 16, "full": 120}  # bare uses the amounts above: 2N + 4 <= MAX_DRAFTS
WORKERS = 2
REQUEST_THREADS = 4
TIMEOUT_SECONDS = 300


def draftgate_throughput(stack: Any, count: int) -> dict[str, Any]:
    warm, drafts = _split(stack.approved_drafts(count + WORKERS))
    with ThreadPoolExecutor(WORKERS) as pool:  # one each, if the broker spreads them so
        _wait_all(stack, list(pool.map(stack.request_execution, warm)))
    with Timer() as timer, ThreadPoolExecutor(REQUEST_THREADS) as pool:
        execution_ids = list(pool.map(stack.request_execution, drafts))
        accepted = time.perf_counter() - timer.start
        finished = _wait_all(stack, execution_ids)
    statuses: dict[str, int] = {}
    for status, _ in finished.values():
        statuses[status] = statuses.get(status, 0) + 1
    succeeded = statuses.pop("succeeded", 0)
    # When the API had accepted the last request: the rest of the time is the workers'.
    return {**_figures(succeeded, timer.elapsed, statuses), "all_accepted_s": round(accepted, 3)}


def _split(drafts: list[str]) -> tuple[list[str], list[str]]:
    return drafts[:WORKERS], drafts[WORKERS:]


def _wait_all(stack: Any, execution_ids: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        finished = stack.finished(execution_ids)
        if len(finished) == len(execution_ids) or time.monotonic() > deadline:
            return finished
        time.sleep(POLL_SECONDS * 5)


def bare_throughput(bare: Any, count: int) -> dict[str, Any]:
    errors: dict[str, int] = {}
    done = 0
    for result in [bare.send(cents) for cents in range(count + 1, count + 1 + WORKERS)]:
        result.get(timeout=TIMEOUT_SECONDS, interval=POLL_SECONDS)  # the same warm-up
    first = count + 1 + WORKERS
    with Timer() as timer:
        results = [bare.send(cents) for cents in range(first, first + count)]
        for result in results:
            try:
                result.get(timeout=TIMEOUT_SECONDS, interval=POLL_SECONDS)
                done += 1
            except Exception as exc:  # counted, never raised
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
    return _figures(done, timer.elapsed, errors)


def _figures(done: int, elapsed: float, errors: dict[str, int]) -> dict[str, Any]:
    return {
        "executions": done,
        "elapsed_s": round(elapsed, 3),
        "executions_per_s": round(done / elapsed, 2) if elapsed > 0 else None,
        "errors": errors,
        "error_total": sum(errors.values()),
    }


COLUMNS = [
    ("name", "name"),
    ("executions", "executions"),
    ("elapsed_s", "seconds"),
    ("executions_per_s", "executions/s"),
    ("error_total", "errors"),
    ("ratio", "ratio vs bare Celery"),
]


def main() -> None:
    args = quick_parser(__doc__ or "").parse_args()
    count = COUNTS[args.mode]
    with (
        tempfile.TemporaryDirectory(prefix="b3-") as workdir,
        draftgate_stack("redis", Path(workdir), concurrency=WORKERS) as stack,
    ):
        draftgate = draftgate_throughput(stack, count)
        with bare_celery(stack, Path(workdir), concurrency=WORKERS) as bare:
            baseline = bare_throughput(bare, count)
    value = ratio(draftgate["executions_per_s"], baseline["executions_per_s"])
    rows = [
        {"name": "bare Celery (2 processes)", **baseline, "ratio": 1.0},
        {
            "name": "draftgate (2 worker processes)",
            **draftgate,
            "ratio": None if value is None else round(value, 3),
        },
    ]
    print_table("B3 execution throughput, PostgreSQL + Redis", rows, COLUMNS)
    path = write_json("b3_throughput", {"mode": args.mode, "count": count, "rows": rows}, args.json)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
