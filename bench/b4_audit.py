"""B4 audit: verify events/s against the hashing limit, filtered-page p99 at N events, export
MB/s and peak memory.

    python bench/b4_audit.py [--quick] [--database sqlite|postgresql] [--events N]

One tenant's chain of N real, hash-chained events (``audit_query.build``: a realistic mix of
types, actors, drafts and traces), and the same at a baseline size (N / 100):

- **verify**: ``audit.actions.verify`` over the whole chain (read from the database, every
  hash recomputed) in events/s, against the **hashing limit**: SHA-256 alone over exactly
  the bytes verify hashes (domain prefix + JCS of each event's body), measured in this run
  on the same events; and against JCS + SHA-256 (what a verifier cannot avoid either) and
  reading the rows alone (typed, as verify reads them, and raw from the driver). The offline
  verifier (``verify_export``) over the export's lines.
- **canonical JSON**: ``canonical_json`` alone on a typical audit body and a propose's
  params, in microseconds, against ``rfc8785`` (the pure-Python reference) on the same value.
- **filtered page**: the indexed queries behind ``GET /v1/audit/events`` (``type``, ``actor``,
  ``draft_id``, ``trace_id``, a time window, a deep cursor), each called repeatedly; p50/p99
  at N against the baseline size (``audit_query.measure``'s medians are in the JSON too).
- **export**: ``audit.review.export_lines`` (the NDJSON behind ``GET /v1/audit/export``)
  streamed whole, MB/s against reading the same rows raw (one streamed SELECT, each row
  ``json.dumps``-ed), and how much the RSS of the (fresh) process streaming it grows, at N
  and at the baseline size: flat means it streams (``audit_query.py`` still reports the peak of
  Python's own allocations, tracemalloc, on its own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import rfc8785
from sqlalchemy import text

from bench.audit_query import TENANT, build, database
from bench.common import Timer, percentile, print_table, quick_parser, write_json
from service.audit import actions as audit_actions
from service.audit import review
from service.audit.chain import DOMAIN_PREFIX, hash_body
from service.audit.offline import verify_export
from service.audit.repository import page
from service.audit.schemas import EventFilter
from service.audit.verification import stored_chain
from service.canonical import canonical_json
from service.db import make_engine, read_scope
from service.migrate import upgrade

SIZES = {"quick": 20_000, "full": 1_000_000}
PAGE_CALLS = {"quick": 30, "full": 200}  # per filter
HASH_SAMPLE = 200_000  # events whose bytes are held in memory for the hashing limit
REFERENCE_SAMPLE = 20_000  # of those, encoded with rfc8785 too
RSS_EVERY = 1_000


def verify_figures(engine: Any, count: int) -> dict[str, Any]:
    with read_scope(engine) as session, Timer() as timer:
        result = audit_actions.verify(session, TENANT)
    assert result.ok, result
    with read_scope(engine) as session, Timer() as read:
        typed_rows = sum(1 for _ in stored_chain(session, TENANT))
    with Timer() as raw_read:
        raw_rows = _raw_chain_rows(engine)
    assert typed_rows == raw_rows == count, (typed_rows, raw_rows)
    with read_scope(engine) as session:
        bodies = [hash_body(event) for event in islice(stored_chain(session, TENANT), HASH_SAMPLE)]
    encoded = [DOMAIN_PREFIX + canonical_json(body) for body in bodies]
    with Timer() as sha:
        for data in encoded:
            hashlib.sha256(data).hexdigest()
    with Timer() as jcs:
        for body in bodies:
            hashlib.sha256(DOMAIN_PREFIX + canonical_json(body)).hexdigest()
    with Timer() as reference:
        for body in bodies[:REFERENCE_SAMPLE]:
            rfc8785.dumps(body)
    verify_rate = count / timer.elapsed
    sha_rate = len(encoded) / sha.elapsed
    jcs_rate = len(bodies) / jcs.elapsed
    return {
        "verify_events_per_s": round(verify_rate),
        "sha256_limit_events_per_s": round(sha_rate),
        "jcs_sha256_events_per_s": round(jcs_rate),
        # Reading the rows alone: stored_chain (the Core SELECT verify streams), and the same
        # columns as the driver returns them (no type processing: the floor of any read).
        "read_events_per_s": round(count / read.elapsed),
        "raw_read_events_per_s": round(count / raw_read.elapsed),
        "verify_vs_sha256": round(verify_rate / sha_rate, 4),
        "verify_vs_jcs_sha256": round(verify_rate / jcs_rate, 4),
        "mean_hashed_bytes": round(sum(map(len, encoded)) / len(encoded)),
        "rfc8785_us_per_body": round(reference.elapsed / len(bodies[:REFERENCE_SAMPLE]) * 1e6, 2),
    }


def _raw_chain_rows(engine: Any) -> int:
    statement = text(
        "SELECT seq, at, tenant, actor, type, draft_id, execution_id, trace_id, data, prev_hash,"
        " hash FROM audit_events WHERE tenant = :tenant ORDER BY seq"
    )
    with engine.connect() as connection:
        result = connection.execution_options(stream_results=True).execute(
            statement, {"tenant": TENANT}
        )
        return sum(1 for _ in result)


def offline_figures(engine: Any, count: int) -> dict[str, Any]:
    """The offline verifier (``draftgate audit verify --file``) over the export's first
    lines, held in memory: parsing, the shape checks and the hashing, no database."""
    lines = list(islice(review.export_lines(engine, TENANT, EventFilter()), HASH_SAMPLE))
    with Timer() as timer:
        result = verify_export(lines)
    assert result.ok, result
    assert result.events_checked == len(lines), result
    return {"offline_verify_events_per_s": round(len(lines) / timer.elapsed)}


# A tool call's audit body as draftgate records it, and the params of a propose_refund.
TYPICAL_PARAMS = {
    "order_id": "ORD-1004",
    "amount": {"currency": "EUR", "amount_minor": 78_500},
    "reason": "damaged",
    "note": "Kratzer am Gehäuse",
}
TYPICAL_BODY = {
    "seq": 120_457,
    "at": "2026-12-01T10:00:00.123456Z",
    "tenant": "demo",
    "actor": "agent:support-bot",
    "type": "tool.called",
    "draft_id": "dft_01jf6v2x8m3k9q4r7t5w0y1z2a",
    "execution_id": None,
    "trace_id": "0af7651916cd43dd8448eb211c80319c",
    "data": {
        "tool": "propose_refund",
        "arguments": TYPICAL_PARAMS,
        "outcome": "ok",
        "replayed": False,
        "latency_us": 8_412,
    },
    "prev_hash": "5f" * 32,
}


def canonical_figures() -> dict[str, Any]:
    """canonical_json alone, in microseconds (best of 7 rounds), on a typical audit body and
    a propose's params, against rfc8785 (the pure-Python reference) on the same values."""
    figures: dict[str, Any] = {}
    for name, value in (("audit_body", TYPICAL_BODY), ("propose_params", TYPICAL_PARAMS)):
        for label, encode in (("canonical_json", canonical_json), ("rfc8785", rfc8785.dumps)):
            best = min(timeit.repeat(lambda e=encode, v=value: e(v), number=2_000, repeat=7))
            figures[f"{label}_us_{name}"] = round(best / 2_000 * 1e6, 2)
        figures[f"bytes_{name}"] = len(canonical_json(value))
    return figures


def page_figures(engine: Any, count: int, probes: dict[str, Any], calls: int) -> dict[str, Any]:
    from datetime import timedelta

    deep = count - count // 10
    filters = {
        "type": (EventFilter(type="tool.refused"), 0),
        "actor": (EventFilter(actor="approver:bob"), 0),
        "draft_id": (EventFilter(draft_id=probes["draft_id"]), 0),
        "trace_id": (EventFilter(trace_id=probes["trace_id"]), 0),
        "time window": (
            EventFilter(since=probes["at"], until=probes["at"] + timedelta(seconds=2)),
            0,
        ),
        "type, deep cursor": (EventFilter(type="tool.refused"), deep),
    }
    per_filter: dict[str, dict[str, float]] = {}
    every: list[float] = []
    with read_scope(engine) as session:
        for name, (where, after) in filters.items():
            samples = _repeat(
                lambda w=where, a=after: page(session, TENANT, w, after_seq=a, limit=100), calls
            )
            every.extend(samples)
            per_filter[name] = {
                "p50_ms": round(percentile(samples, 50) * 1000, 3),
                "p99_ms": round(percentile(samples, 99) * 1000, 3),
            }
    return {
        "page_p50_ms": round(percentile(every, 50) * 1000, 3),
        "page_p99_ms": round(percentile(every, 99) * 1000, 3),
        "page_by_filter": per_filter,
    }


def _repeat(work: Callable[[], Any], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return samples


def export_figures(url: str, engine: Any, count: int) -> dict[str, Any]:
    """The export streamed in a fresh process (``python -m bench.b4_audit --export-child``),
    so its RSS growth is the export's own, not memory this process freed after the build."""
    child = subprocess.run(
        [sys.executable, "-m", "bench.b4_audit", "--export-child", url],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    exported = json.loads(child.stdout.strip().splitlines()[-1])
    assert exported["lines"] == count
    with Timer() as raw_timer:
        raw = _raw_export_bytes(engine)
    export_rate = exported["bytes"] / 2**20 / exported["seconds"]
    raw_rate = raw / 2**20 / raw_timer.elapsed
    return {
        "export_mb": round(exported["bytes"] / 2**20, 2),
        "export_mb_per_s": round(export_rate, 2),
        "raw_read_mb_per_s": round(raw_rate, 2),
        "export_vs_raw": round(export_rate / raw_rate, 3),
        "export_rss_before_mib": round(exported["rss_before"] / 2**20, 1),
        "export_rss_growth_mib": round((exported["rss_peak"] - exported["rss_before"]) / 2**20, 2),
    }


def export_child(url: str) -> None:
    """Stream the whole export once; print bytes, lines, seconds and RSS (before, peak)."""
    engine = make_engine(url)
    with read_scope(engine) as session:  # connect and load what the export needs first
        page(session, TENANT, EventFilter(), after_seq=0, limit=1)
    exported, lines, before = 0, 0, _rss_bytes()
    peak = before
    with Timer() as timer:
        for line in review.export_lines(engine, TENANT, EventFilter()):
            exported += len(line.encode())
            lines += 1
            if lines % RSS_EVERY == 0:
                peak = max(peak, _rss_bytes())
    figures = {"bytes": exported, "lines": lines, "seconds": timer.elapsed}
    print(json.dumps({**figures, "rss_before": before, "rss_peak": max(peak, _rss_bytes())}))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _raw_export_bytes(engine: Any) -> int:
    """The floor: the same rows in one streamed SELECT, each row dumped as JSON."""
    total = 0
    statement = text("SELECT * FROM audit_events WHERE tenant = :tenant ORDER BY seq")
    with engine.connect() as connection:
        result = connection.execution_options(stream_results=True).execute(
            statement, {"tenant": TENANT}
        )
        for row in result.mappings():
            total += len(json.dumps(dict(row), default=str).encode()) + 1
    return total


def measure_size(kind: str, workdir: Path, count: int, calls: int) -> dict[str, Any]:
    url, drop = database(kind, workdir)
    try:
        upgrade(url)
        engine = make_engine(url)
        with Timer() as built:
            probes = build(engine, count)
        print(f"built {count:,} events in {built.elapsed:.0f} s", flush=True)
        figures: dict[str, Any] = {
            "name": f"{count:,} events",
            "events": count,
            "build_s": round(built.elapsed, 1),
        }
        figures |= verify_figures(engine, count)
        figures |= offline_figures(engine, count)
        figures |= page_figures(engine, count, probes, calls)
        figures |= export_figures(url, engine, count)
        engine.dispose()
        # Every check above asserts (a chain that does not verify, an export that misses
        # events): a run that gets here had no errors.
        figures["error_total"] = 0
        return figures
    finally:
        drop()


COLUMNS = [
    ("name", "chain"),
    ("verify_events_per_s", "verify ev/s"),
    ("sha256_limit_events_per_s", "SHA-256 ev/s"),
    ("verify_vs_sha256", "verify / SHA-256"),
    ("jcs_sha256_events_per_s", "JCS+SHA-256 ev/s"),
    ("read_events_per_s", "read ev/s"),
    ("offline_verify_events_per_s", "offline ev/s"),
    ("page_p50_ms", "page p50 ms"),
    ("page_p99_ms", "page p99 ms"),
    ("export_mb_per_s", "export MB/s"),
    ("export_vs_raw", "export / raw"),
    ("export_rss_growth_mib", "export RSS growth MiB"),
]


def main() -> None:
    parser = quick_parser(__doc__ or "")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--events", type=int, help="chain length (default: 20k quick, 1M full)")
    parser.add_argument("--export-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export_child:
        export_child(args.export_child)
        return
    count = args.events or SIZES[args.mode]
    sizes = [max(1_000, count // 100), count]
    calls = PAGE_CALLS[args.mode]
    with tempfile.TemporaryDirectory(prefix="b4-") as workdir:
        rows = [measure_size(args.database, Path(workdir), size, calls) for size in sizes]
    base, big = rows
    ratios = {
        "page_p99_vs_baseline_size": round(big["page_p99_ms"] / base["page_p99_ms"], 3),
        "export_rss_growth_mib_at_baseline_size": base["export_rss_growth_mib"],
        "export_rss_growth_mib_at_n": big["export_rss_growth_mib"],
    }
    canonical = canonical_figures()
    print_table(f"B4 audit ({args.database})", rows, COLUMNS)
    print(f"at {count:,} vs {sizes[0]:,} events: {ratios}")
    print(f"canonical JSON alone, us: {canonical}")
    path = write_json(
        "b4_audit",
        {
            "mode": args.mode,
            "database": args.database,
            "rows": rows,
            "ratios": ratios,
            "canonical_json": canonical,
        },
        args.json,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
