"""B1 tool calls: ``get_order`` and ``propose_refund`` against a bare SDK no-op tool.

Usage: python bench/b1_tools.py [--quick | --full] [--json PATH] [--backends sqlite,postgresql]

Every server runs in its own process, started as in production: draftgate's with
``python -m service.cli serve mcp`` (the embedded SQLite default, and a private PostgreSQL
database created for the run and dropped after it), the baseline as a bare ``MCPServer``
with one no-op tool on uvicorn (bench/stack.py). Both serve stateless streamable HTTP with
JSON responses, and the same client drives both: the official SDK ``Client`` over
streamable HTTP, one ``Client`` (and one HTTP connection pool) per session, the sessions
spread over two client processes so that the load generator is not a single core's loop.

Measured, each with its ratio against the no-op at the same number of sessions (in full
mode the no-op is measured again right before each backend's block):
    get_order (a read) and propose_refund, at 1 and 8 concurrent sessions, per backend;
    on PostgreSQL at 8 sessions also with 2 MCP server processes (4 sessions on each port).

A fair propose: every call carries a fresh idempotency key, an amount within the order's
refundable bound and a unique note, so each call records a new draft (a replay of an
identical open draft would be a cheap lookup); any replayed or repeated draft counts as an
error.

Errors are counted by kind: ``database_locked`` (in a tool error or the server's log),
``http_5xx`` (responses seen by the client), ``tool_error:<CODE>``, or the exception type.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from contextlib import AsyncExitStack, ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    Budget,
    CallError,
    Sample,
    arun_calls,
    postgres_database,
    print_table,
    progress,
    quick_parser,
    ratio,
    row,
    write_json,
)
from bench.stack import bench_deployment, noop_server

NAME = "b1_tools"
SESSIONS = (1, 8)
CLIENT_PROCESSES = 2
PROPOSE_ORDER = "delivered"  # refundable (78,500 minor units): room for a different amount


@dataclass(frozen=True)
class Mode:
    budget: Budget  # per series
    warmup: int  # calls per session before the measured part
    rebaseline: bool  # measure the no-op again before each backend's block (see run())


MODES = {
    "quick": Mode(Budget(calls=200, seconds=0.6), warmup=2, rebaseline=False),
    "full": Mode(Budget(calls=50_000, seconds=15.0), warmup=50, rebaseline=True),
}


@dataclass(frozen=True)
class Load:
    """One measurement: a tool called by ``len(urls)`` sessions (one URL per session)."""

    tool: str
    urls: tuple[str, ...]
    token: str | None
    order_id: str | None
    budget: Budget
    warmup: int
    barrier: Any = None  # a Manager's Barrier: every client process warmed up, start together


@dataclass
class Driven:
    """What one client process measured."""

    sample: Sample
    started_at: float
    ended_at: float
    drafts: list[str] = field(default_factory=list)


# --- the client side (runs in the client processes) ------------------------------------------


def _ready(_: int) -> None:
    import mcp.client  # noqa: F401 - imported once, before the first measurement

    time.sleep(0.5)  # keep this process busy so the pool starts the other one too


def drive(load: Load) -> Driven:
    return asyncio.run(_drive(load))


async def _drive(load: Load) -> Driven:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    driven = Driven(Sample(), 0.0, 0.0)
    server_errors: Counter[str] = Counter()

    async def count_5xx(response: Any) -> None:
        if response.status_code >= 500:
            server_errors["http_5xx"] += 1

    async with AsyncExitStack() as stack:
        calls = []
        for url in load.urls:
            headers = {"Authorization": f"Bearer {load.token}"} if load.token else {}
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=headers,
                    timeout=httpx2.Timeout(30, read=120),
                    event_hooks={"response": [count_5xx]},
                )
            )
            client = await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http))
            )
            calls.append(_call_for(load, client, driven))
        for call in calls:
            for _ in range(load.warmup):
                with suppress(Exception):  # a failure shows again in the measured calls
                    await call()
        driven.drafts.clear()
        server_errors.clear()
        await asyncio.to_thread(load.barrier.wait, 120)
        share = load.budget.split(len(calls))
        driven.started_at = time.time()
        samples = await asyncio.gather(*(arun_calls(call, share) for call in calls))
        driven.ended_at = time.time()
    driven.sample = Sample.merge(samples)
    driven.sample.errors.update(server_errors)
    return driven


def _call_for(load: Load, client: Any, driven: Driven) -> Any:
    if load.tool == "noop":

        async def noop() -> None:
            _check(await client.call_tool("noop", {}))

        return noop
    if load.tool == "get_order":

        async def get_order() -> None:
            _check(await client.call_tool("get_order", {"order_id": load.order_id}))

        return get_order
    counter = iter(range(10**9))

    async def propose_refund() -> None:
        amount = 100 + next(counter) % 70_000  # below the order's refundable 78,500
        unique = uuid.uuid4().hex
        result = await client.call_tool(
            "propose_refund",
            {
                "order_id": load.order_id,
                "amount": {"amount_minor": amount, "currency": "USD"},
                "reason": "damaged",
                # Unique, so no open draft with the same arguments exists (that would be
                # returned as a replay instead of recording a new draft).
                "note": f"bench call {unique}",
                "idempotency_key": f"b1-{unique}",
            },
        )
        _check(result)
        content = result.structured_content or {}
        if content.get("replayed"):
            raise CallError("replayed")
        driven.drafts.append(str(content.get("draft_id")))

    return propose_refund


def _check(result: Any) -> None:
    if not result.is_error:
        return
    import json

    text = getattr(result.content[0], "text", "") if result.content else ""
    if "database is locked" in text:
        raise CallError("database_locked")
    try:
        code = json.loads(text).get("code", "unknown")
    except ValueError:
        code = "unparsed"
    raise CallError(f"tool_error:{code}", text[:200])


# --- the orchestration -----------------------------------------------------------------------


class Runner:
    """Runs loads in the client processes, aligned to start together."""

    def __init__(
        self, pool: ProcessPoolExecutor, manager: Any, budget: Budget, warmup: int
    ) -> None:
        self.pool = pool
        self.manager = manager
        self.budget = budget
        self.warmup = warmup
        # Start every client process (and import the SDK) before the first measurement.
        list(pool.map(_ready, range(CLIENT_PROCESSES)))

    def measure(
        self, tool: str, urls: list[str], sessions: int, token: str | None, order_id: str | None
    ) -> tuple[Sample, list[str]]:
        """``sessions`` sessions, round-robin over ``urls``, split across client processes."""
        per_session = [urls[index % len(urls)] for index in range(sessions)]
        parts = [per_session[i::CLIENT_PROCESSES] for i in range(CLIENT_PROCESSES)]
        parts = [part for part in parts if part]
        # Sessions are set up and warmed up first; the measured part starts together in
        # every client process, and elapsed spans the first start to the last end.
        barrier = self.manager.Barrier(len(parts))
        loads = [
            Load(
                tool,
                tuple(part),
                token,
                order_id,
                Budget(self.budget.calls * len(part) // sessions, self.budget.seconds),
                self.warmup,
                barrier,
            )
            for part in parts
        ]
        results = list(self.pool.map(drive, loads))
        sample = Sample.merge(
            [result.sample for result in results],
            elapsed=max(r.ended_at for r in results) - min(r.started_at for r in results),
        )
        drafts = [draft for result in results for draft in result.drafts]
        progress(f"{tool} at {sessions} sessions on {len(urls)} server(s): {sample.calls} calls")
        return sample, drafts


def server_log_errors(paths: list[Path]) -> tuple[Counter[str], str]:
    """Errors only the server saw ('database is locked', unhandled tracebacks) and the
    first traceback's last lines, so a failing run says why after its temp dir is gone."""
    found: Counter[str] = Counter()
    excerpt = ""
    for path in paths:
        text = path.read_text(errors="replace") if path.exists() else ""
        found["database_locked"] += text.count("database is locked")
        found["server_traceback"] += text.count(TRACEBACK)
        if not excerpt and TRACEBACK in text:
            lines = text[text.index(TRACEBACK) :].splitlines()
            # The traceback ends at its first unindented line after the header: the error.
            end = next((i for i, line in enumerate(lines[1:], 1) if line[:1] not in " "), 0)
            excerpt = "\n".join(lines[max(0, end - 30) : end + 1])
    return +found, excerpt


TRACEBACK = "Traceback (most recent call last)"


def bench_backend(
    runner: Runner, backend: str, database_url: str, root: Path, baselines: dict[int, Sample]
) -> list[dict[str, Any]]:
    deployment = bench_deployment(root / backend, database_url)
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        stack.callback(deployment.close)
        manifest = deployment.prepare()
        token = manifest["tokens"]["agent"]
        orders = manifest["orders"]
        # The second process (PostgreSQL) starts with the first; idle, it costs nothing.
        first = deployment.start_http("mcp", wait=False)
        second = deployment.start_http("mcp", wait=False) if backend == "postgresql" else None
        for process in (first, second):
            if process is not None:
                process.wait_ready()
        for tool, order in (("get_order", "delivered"), ("propose_refund", PROPOSE_ORDER)):
            for sessions in SESSIONS:
                sample, drafts = runner.measure(
                    tool, [first.mcp_url], sessions, token, orders[order]
                )
                _count_repeated_drafts(sample, drafts)
                rows.append(_row(backend, tool, sessions, 1, sample, baselines[sessions]))
        if second is not None:
            for tool, order in (("get_order", "delivered"), ("propose_refund", PROPOSE_ORDER)):
                sample, drafts = runner.measure(
                    tool, [first.mcp_url, second.mcp_url], 8, token, orders[order]
                )
                _count_repeated_drafts(sample, drafts)
                rows.append(_row(backend, tool, 8, 2, sample, baselines[8]))
        logged, excerpt = server_log_errors([p.log for p in deployment.processes])
    for item in rows:
        item["server_log_errors"] = dict(logged)  # per backend: the log does not say which call
        if excerpt:
            item["server_log_excerpt"] = excerpt
    return rows


def _count_repeated_drafts(sample: Sample, drafts: list[str]) -> None:
    repeated = len(drafts) - len(set(drafts))
    if repeated:
        sample.errors["repeated_draft"] += repeated


def _row(
    backend: str, tool: str, sessions: int, processes: int, sample: Sample, baseline: Sample
) -> dict[str, Any]:
    name = f"{tool} · {backend} · {sessions} sess" + (" · 2 procs" if processes > 1 else "")
    return row(
        name, sample, baseline, tool=tool, backend=backend, sessions=sessions, processes=processes
    )


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's B1 targets, checked against this run (reported, never asserted)."""
    checks: list[dict[str, Any]] = []
    for item in rows:
        if item["tool"] == "noop":
            continue
        p50, p99 = item["p50_ms"], item["p99_ms"]
        checks.append(
            {
                "row": item["name"],
                "ratio_ge_0.33": item["ratio"] is not None and item["ratio"] >= 0.33,
                "p99_le_3x_p50": p50 is not None and p99 is not None and p99 <= 3 * p50,
                "zero_errors": item["error_total"] == 0 and not item.get("server_log_errors"),
            }
        )
    by_procs = {
        (item["tool"], item["processes"]): item["calls_per_s"]
        for item in rows
        if item.get("backend") == "postgresql" and item["sessions"] == 8
    }
    for tool in ("get_order", "propose_refund"):
        one, two = by_procs.get((tool, 1)), by_procs.get((tool, 2))
        checks.append(
            {
                "row": f"{tool} · postgresql · 8 sess: 2 procs vs 1",
                "scaling": ratio(two, one),
                "grows_with_processes": bool(one and two and two > one),
            }
        )
    return checks


def measure_baselines(
    runner: Runner, noop: Any, before: str | None
) -> tuple[dict[int, Sample], list[dict[str, Any]]]:
    """The no-op at every session count; ``before`` names the block it is the baseline of."""
    baselines, rows = {}, []
    for sessions in SESSIONS:
        baselines[sessions], _ = runner.measure("noop", [noop.mcp_url], sessions, None, None)
        suffix = f" · before {before}" if before else ""
        rows.append(
            row(
                f"no-op (bare MCPServer) · {sessions} sess{suffix}",
                baselines[sessions],
                baselines[sessions],
                tool="noop",
                backend="none",
                sessions=sessions,
                processes=1,
            )
        )
    return baselines, rows


def run(runner: Runner, backends: list[str], root: Path, rebaseline: bool) -> list[dict[str, Any]]:
    """Every row. With ``rebaseline`` the no-op is measured again right before each
    backend's block, so a shared machine's drifting load hits a row and its baseline alike."""
    rows: list[dict[str, Any]] = []
    noop = noop_server(root)
    try:
        baselines: dict[int, Sample] = {}
        for backend in backends:
            if rebaseline or not baselines:
                baselines, measured = measure_baselines(
                    runner, noop, backend if rebaseline else None
                )
                rows += measured
            if backend == "sqlite":
                rows += bench_backend(runner, backend, "", root, baselines)
                continue
            with postgres_database() as url:
                rows += bench_backend(runner, backend, url, root, baselines)
    finally:
        noop.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = quick_parser(__doc__.splitlines()[0] if __doc__ else NAME)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args(argv)
    mode = MODES[args.mode]
    backends = [name.strip() for name in args.backends.split(",") if name.strip()]
    context = multiprocessing.get_context("spawn")
    with (
        tempfile.TemporaryDirectory(prefix="dg-b1-") as tmp,
        context.Manager() as manager,
        ProcessPoolExecutor(CLIENT_PROCESSES, mp_context=context) as pool,
    ):
        runner = Runner(pool, manager, mode.budget, mode.warmup)
        rows = run(runner, backends, Path(tmp), rebaseline=mode.rebaseline)
    checks = targets(rows)
    print_table(f"B1 tool calls ({args.mode}; ratio = calls/s vs the no-op, same sessions)", rows)
    path = write_json(
        NAME,
        {
            "mode": args.mode,
            "budget": {"calls": mode.budget.calls, "seconds": mode.budget.seconds},
            "client_processes": CLIENT_PROCESSES,
            "rows": rows,
            "targets": checks,
            "error_total": sum(
                item["error_total"] + sum(item.get("server_log_errors", {}).values())
                for item in rows
            ),
        },
        args.json,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
