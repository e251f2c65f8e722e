"""Audit log at scale: filtered pages and export memory, N events against a baseline.

Usage: python bench/audit_query.py [--database sqlite|postgresql] [--events N] [--baseline B]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import insert

from service.audit import repository, review
from service.audit.chain import GENESIS_HASH, event_hash
from service.audit.models import AuditEvent, AuditHead
from service.audit.schemas import EventFilter
from service.db import make_engine, read_scope, session_scope
from service.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
TENANT = "bench"
TYPES = [
    "tool.called",
    "tool.called",
    "tool.called",
    "tool.refused",
    "draft.proposed",
    "approval.approved",
    "execution.succeeded",
]
ACTORS = ["agent:bot-1", "agent:bot-2", "approver:alice", "approver:bob", "system:worker"]
BATCH = 5_000
REPEATS = 7


def build(engine: Any, count: int) -> dict[str, Any]:
    """Insert ``count`` chained events; returns ids to filter on (picked near the end)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    previous, rows, probes = GENESIS_HASH, [], {}
    with session_scope(engine) as session:
        for seq in range(1, count + 1):
            draft_id = f"dft_{seq // 7:032x}"
            body = {
                "seq": seq,
                "at": start + timedelta(milliseconds=seq),
                "tenant": TENANT,
                "actor": ACTORS[seq % len(ACTORS)],
                "type": TYPES[seq % len(TYPES)],
                "draft_id": draft_id,
                "execution_id": None,
                "trace_id": f"{seq // 11:032x}",
                "data": {"tool": "get_order", "latency_us": seq % 997},
                "prev_hash": previous,
            }
            body["hash"] = event_hash(body)
            previous = body["hash"]
            rows.append(body)
            if seq == count - count // 10:  # a probe 90% of the way in
                probes = {"draft_id": draft_id, "trace_id": body["trace_id"], "at": body["at"]}
            if len(rows) == BATCH:
                session.execute(insert(AuditEvent), rows)
                rows = []
        if rows:
            session.execute(insert(AuditEvent), rows)
        session.add(AuditHead(tenant=TENANT, seq=count, hash=previous))
    return probes


def timed(work: Callable[[], Any]) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def measure(engine: Any, count: int, probes: dict[str, Any]) -> dict[str, float]:
    deep_cursor = count - count // 10
    windows = {
        "type": EventFilter(type="tool.refused"),
        "actor": EventFilter(actor="approver:bob"),
        "draft_id": EventFilter(draft_id=probes["draft_id"]),
        "trace_id": EventFilter(trace_id=probes["trace_id"]),
        "time window": EventFilter(since=probes["at"], until=probes["at"] + timedelta(seconds=2)),
    }
    results: dict[str, float] = {}
    with read_scope(engine) as session:
        for name, filters in windows.items():
            results[f"page: {name}"] = timed(
                lambda f=filters: repository.page(session, TENANT, f, after_seq=0, limit=100)
            )
        results["page: type, deep cursor"] = timed(
            lambda: repository.page(
                session, TENANT, windows["type"], after_seq=deep_cursor, limit=100
            )
        )
    tracemalloc.start()
    lines = sum(1 for _ in review.export_lines(engine, TENANT, EventFilter()))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert lines == count
    results["export peak MiB"] = peak / 2**20
    return results


def database(kind: str, workdir: Path) -> tuple[str, Callable[[], None]]:
    if kind == "sqlite":
        return f"sqlite:///{workdir / f'bench-{secrets.token_hex(4)}.db'}", lambda: None
    name = f"dg_bench_{secrets.token_hex(4)}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--baseline", type=int, default=10_000)
    args = parser.parse_args()
    report: dict[str, Any] = {"database": args.database, "sizes": {}}
    with tempfile.TemporaryDirectory() as workdir:
        for count in (args.baseline, args.events):
            url, drop = database(args.database, Path(workdir))
            try:
                upgrade(url)
                engine = make_engine(url)
                started = time.perf_counter()
                probes = build(engine, count)
                print(
                    f"built {count:,} events in {time.perf_counter() - started:.0f} s", flush=True
                )
                report["sizes"][count] = measure(engine, count, probes)
                engine.dispose()
            finally:
                drop()
    base, big = report["sizes"][args.baseline], report["sizes"][args.events]
    print(f"\n{'measure':<28}{args.baseline:>14,}{args.events:>14,}{'ratio':>10}")
    for name in base:
        unit = "" if "MiB" in name else " ms"
        scale = 1 if "MiB" in name else 1000
        print(
            f"{name:<28}{base[name] * scale:>11.2f}{unit:<3}{big[name] * scale:>11.2f}{unit:<3}"
            f"{big[name] / base[name]:>9.2f}x"
        )
    report["ratios"] = {name: big[name] / base[name] for name in base}
    out = ROOT / "bench" / "results" / f"audit_query-{args.database}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
