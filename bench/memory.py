"""Memory: RSS of the API, MCP and worker processes, idle and under load.

Usage: python bench/memory.py [--quick | --full] [--json PATH] [--backends sqlite,postgresql]

Each process is started as ``draftgate serve api|mcp|worker`` starts it (bench/stack.py),
on the embedded default (SQLite, the SQLAlchemy broker, a solo worker) and, in full mode,
on PostgreSQL + Redis (a prefork worker of 2 processes, whose children are counted one
by one and as a tree). The baseline is a bare SDK ``MCPServer`` with one no-op tool on
uvicorn, measured idle and under the same 8-session load, in the same run.

Phases, sampled every 50 ms (RSS from psutil if installed, else /proc/<pid>/status):
    idle     after start-up and one call of each kind (imports done, pools open);
    B1 load  8 MCP sessions calling get_order, then propose_refund (bench/b1_tools.py);
    flows    2 concurrent approve-and-execute flows through the API and the worker: propose
             over MCP, approve with a signed statement and request the execution over the
             API, the worker executes (B3-like; bench/b3_throughput.py measures throughput).

Reported per process: RSS idle, peak RSS under load, and the ratio of each against the
baseline's idle RSS; per tree (a prefork worker and its children): the peak sum of RSS
and of PSS (/proc/<pid>/smaps_rollup; shared pages counted once). The target is an
absolute bound (150 MB per process), checked, not asserted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import tempfile
import threading
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.b1_tools import CLIENT_PROCESSES, Runner
from bench.common import (
    REDIS_URL,
    Budget,
    postgres_database,
    print_table,
    progress,
    quick_parser,
    ratio,
    write_json,
)
from bench.stack import bench_deployment, noop_server
from harness.approvals import signed_decision
from harness.orders import Orders
from service.db import make_engine

NAME = "memory"
TARGET_MB = 150


@dataclass(frozen=True)
class Mode:
    load: Budget  # per B1 series
    flows: int  # approve-and-execute flows under load
    backends: str


MODES = {
    "quick": Mode(Budget(calls=300, seconds=1.0), flows=6, backends="sqlite"),
    "full": Mode(Budget(calls=20_000, seconds=10.0), flows=200, backends="sqlite,postgresql"),
}


# --- reading RSS -----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int | None:
    """Resident set size of ``pid`` (psutil if installed, else /proc/<pid>/status VmRSS)."""
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        kilobytes = _proc_status_kb(pid, "VmRSS:")
        return kilobytes * 1024 if kilobytes else None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


def pss_bytes(pid: int) -> int | None:
    """Proportional set size: shared pages split between the processes sharing them, so
    the PSS of a prefork worker's tree adds up to what it really holds (RSS counts the
    copy-on-write pages the children share with their parent once per process)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _proc_status_kb(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def descendants(pid: int) -> list[int]:
    """The live children of ``pid``, recursively (a prefork worker's pool processes)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in parents.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


@dataclass
class Watched:
    """One server process and its children: current and peak RSS, per process and summed."""

    name: str
    pid: int
    peaks: dict[int, int] = field(default_factory=dict)
    tree_peak: int = 0
    tree_pss_peak: int = 0

    def sample(self) -> dict[int, int]:
        sizes = {}
        for pid in [self.pid, *descendants(self.pid)]:
            size = rss_bytes(pid)
            if size:
                sizes[pid] = size
                self.peaks[pid] = max(self.peaks.get(pid, 0), size)
        self.tree_peak = max(self.tree_peak, sum(sizes.values()))
        pss = sum(pss_bytes(pid) or 0 for pid in sizes)
        self.tree_pss_peak = max(self.tree_pss_peak, pss)
        return sizes

    def reset(self) -> None:
        self.peaks.clear()
        self.tree_peak = 0
        self.tree_pss_peak = 0


class Sampler(threading.Thread):
    """Samples every watched process every ``interval`` seconds until stopped."""

    def __init__(self, watched: list[Watched], interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.watched = watched
        self.interval = interval
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            for item in self.watched:
                item.sample()

    def __enter__(self) -> Sampler:
        for item in self.watched:
            item.reset()
            item.sample()
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.halt.set()
        self.join()
        for item in self.watched:
            item.sample()


def figures(item: Watched) -> dict[str, Any]:
    """The largest single process and the whole tree, in MB."""
    return {
        "max_process_mb": _mb(max(item.peaks.values(), default=0)),
        "tree_mb": _mb(item.tree_peak),
        "tree_pss_mb": _mb(item.tree_pss_peak),
        "processes": len(item.peaks),
    }


def _mb(size: int) -> float:
    return round(size / 1024 / 1024, 1)


# --- load ------------------------------------------------------------------------------------


def flows(
    api_url: str, mcp_url: str, manifest: dict[str, Any], orders: list[str]
) -> dict[str, int]:
    """A propose → approve → execute flow per order (each its own: harness.orders), 2 at a
    time; waits for the executions."""
    return asyncio.run(_flows(api_url, mcp_url, manifest, orders))


async def _flows(
    api_url: str, mcp_url: str, manifest: dict[str, Any], orders: list[str]
) -> dict[str, int]:
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    outcome: dict[str, int] = {"requested": 0, "succeeded": 0, "errors": 0}
    agent = {"Authorization": f"Bearer {manifest['tokens']['agent']}"}
    queue: asyncio.Queue[str] = asyncio.Queue()
    for order in orders:
        queue.put_nowait(order)
    executions: list[str] = []
    async with (
        httpx2.AsyncClient(headers=agent, timeout=30) as mcp_http,
        Client(streamable_http_client(mcp_url, http_client=mcp_http)) as client,
        httpx2.AsyncClient(base_url=api_url, timeout=30) as api,
    ):

        async def worker() -> None:
            while not queue.empty():
                order = queue.get_nowait()
                try:
                    executions.append(await _one_flow(client, api, manifest, order))
                    outcome["requested"] += 1
                except Exception:
                    outcome["errors"] += 1

        await asyncio.gather(worker(), worker())
        outcome["succeeded"] = await _wait_executions(api, manifest, executions)
    return outcome


async def _one_flow(client: Any, api: Any, manifest: dict[str, Any], order: str) -> str:
    result = await client.call_tool(
        "propose_refund",
        {
            "order_id": order,
            "amount": {"amount_minor": 1, "currency": "USD"},
            "reason": "damaged",
            "note": f"memory flow {uuid.uuid4().hex}",
            "idempotency_key": f"mem-{uuid.uuid4().hex}",
        },
    )
    if result.is_error:
        raise RuntimeError(str(result.content))
    draft_id = result.structured_content["draft_id"]
    for approver in ("alice", "bob"):
        headers = _bearer(manifest, f"approver_{approver}")
        detail = (await api.get(f"/v1/drafts/{draft_id}", headers=headers)).raise_for_status()
        draft = detail.json()
        if draft["status"] != "proposed":
            break
        key_file = manifest["approvers"][approver]["private_key_file"]
        body = signed_decision(draft, approver=approver, key_file=key_file)
        response = await api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=headers)
        response.raise_for_status()
    response = await api.post(
        f"/v1/drafts/{draft_id}/execute", headers=_bearer(manifest, "approver_alice")
    )
    response.raise_for_status()
    return str(response.json()["execution_id"])


async def _wait_executions(api: Any, manifest: dict[str, Any], ids: list[str]) -> int:
    headers = _bearer(manifest, "auditor")
    pending, succeeded = set(ids), 0
    deadline = time.monotonic() + 60 + len(ids) * 0.5
    while pending and time.monotonic() < deadline:
        for execution_id in list(pending):
            response = await api.get(f"/v1/executions/{execution_id}", headers=headers)
            status = response.json().get("status") if response.status_code == 200 else None
            if status in {"succeeded", "failed", "expired"}:
                pending.discard(execution_id)
                succeeded += status == "succeeded"
        await asyncio.sleep(0.2)
    return succeeded


def _bearer(manifest: dict[str, Any], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {manifest['tokens'][name]}"}


def measure_baseline(runner: Runner, root: Path) -> dict[str, Any]:
    noop = noop_server(root)
    try:
        watched = Watched("noop", noop.pid)
        runner.measure("noop", [noop.mcp_url], 1, None, None)
        with Sampler([watched]):
            time.sleep(0.3)
        idle = figures(watched)
        with Sampler([watched]):
            runner.measure("noop", [noop.mcp_url], 8, None, None)
        return {"idle": idle, "load": figures(watched)}
    finally:
        noop.stop()


def measure_backend(
    runner: Runner, backend: str, database_url: str, broker_url: str, root: Path, flow_count: int
) -> dict[str, Any]:
    queue = f"bench-mem-{secrets.token_hex(6)}" if broker_url else ""
    deployment = bench_deployment(root / backend, database_url, broker_url, queue)
    engine = None
    try:
        manifest = deployment.prepare()
        api = deployment.start_http("api", wait=False)
        mcp = deployment.start_http("mcp", wait=False)
        worker = deployment.start_worker(wait=False)
        for process in (api, mcp, worker):
            process.wait_ready()
        progress(f"{backend}: started")
        watched = [Watched("api", api.pid), Watched("mcp", mcp.pid), Watched("worker", worker.pid)]
        token, orders = manifest["tokens"]["agent"], manifest["orders"]
        engine = make_engine(deployment.settings.resolved_database_url())
        flow_orders = Orders(engine, 5)
        # one of everything: imports, pools
        flows(api.base_url, mcp.mcp_url, manifest, flow_orders.take(1))
        progress(f"{backend}: first flow")
        with Sampler(watched):
            time.sleep(0.3)
        idle = {item.name: figures(item) for item in watched}
        with Sampler(watched):
            load = [
                runner.measure(tool, [mcp.mcp_url], 8, token, orders["delivered"])[0]
                for tool in ("get_order", "propose_refund")
            ]
            progress(f"{backend}: B1 load")
            flowed = flows(api.base_url, mcp.mcp_url, manifest, flow_orders.take(flow_count))
            progress(f"{backend}: flows")
        under_load = {item.name: figures(item) for item in watched}
        return {
            "idle": idle,
            "load": under_load,
            "b1_calls": sum(sample.calls for sample in load),
            "b1_errors": sum(sample.error_total for sample in load),
            "flows": flowed,
        }
    finally:
        if engine is not None:
            engine.dispose()
        deployment.close()
        progress(f"{backend}: stopped")
        if broker_url:
            _purge_redis(broker_url, queue)


def _purge_redis(url: str, queue: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"*{queue}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def rows_of(name: str, result: dict[str, Any], baseline_mb: float) -> list[dict[str, Any]]:
    rows = []
    for process in ("api", "mcp", "worker"):
        idle, load = result["idle"][process], result["load"][process]
        rows.append(
            {
                "name": f"{process} · {name}",
                "idle_mb": idle["max_process_mb"],
                "load_mb": load["max_process_mb"],
                "tree_mb": load["tree_mb"],
                "tree_pss_mb": load["tree_pss_mb"],
                "processes": load["processes"],
                "ratio_idle": _ratio(idle["max_process_mb"], baseline_mb),
                "ratio_load": _ratio(load["max_process_mb"], baseline_mb),
                "within_target": load["max_process_mb"] <= TARGET_MB,
            }
        )
    return rows


def _ratio(value: float, baseline: float) -> float | None:
    computed = ratio(value, baseline)
    return None if computed is None else round(computed, 2)


COLUMNS = [
    ("name", "process"),
    ("idle_mb", "idle MB"),
    ("load_mb", "peak MB under load"),
    ("tree_mb", "tree RSS MB"),
    ("tree_pss_mb", "tree PSS MB"),
    ("ratio_idle", "idle vs baseline"),
    ("ratio_load", "load vs baseline"),
    ("within_target", f"≤ {TARGET_MB} MB"),
]


def main(argv: list[str] | None = None) -> int:
    parser = quick_parser(__doc__.splitlines()[0] if __doc__ else NAME)
    parser.add_argument("--backends", default=None, help="default: sqlite (quick), both (full)")
    args = parser.parse_args(argv)
    mode = MODES[args.mode]
    backends = [b.strip() for b in (args.backends or mode.backends).split(",") if b.strip()]
    context = multiprocessing.get_context("spawn")
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="dg-mem-") as tmp,
        context.Manager() as manager,
        ProcessPoolExecutor(CLIENT_PROCESSES, mp_context=context) as pool,
    ):
        root = Path(tmp)
        runner = Runner(pool, manager, mode.load, warmup=2)
        baseline = measure_baseline(runner, root)
        progress("baseline")
        for backend in backends:
            if backend == "sqlite":
                results[backend] = measure_backend(runner, backend, "", "", root, mode.flows)
                continue
            with postgres_database() as url:
                results[backend] = measure_backend(
                    runner, backend, url, REDIS_URL, root, mode.flows
                )
    baseline_mb = baseline["idle"]["max_process_mb"]
    rows = [
        {
            "name": "no-op MCPServer (baseline)",
            "idle_mb": baseline_mb,
            "load_mb": baseline["load"]["max_process_mb"],
            "tree_mb": baseline["load"]["tree_mb"],
            "tree_pss_mb": baseline["load"]["tree_pss_mb"],
            "ratio_idle": 1.0,
            "ratio_load": _ratio(baseline["load"]["max_process_mb"], baseline_mb),
            "within_target": baseline["load"]["max_process_mb"] <= TARGET_MB,
        }
    ]
    for backend, result in results.items():
        rows += rows_of(
            "embedded" if backend == "sqlite" else "PostgreSQL + Redis", result, baseline_mb
        )
    print_table(f"Memory ({args.mode}; RSS, ratio vs the no-op server idle)", rows, COLUMNS)
    errors = sum(r["b1_errors"] + r["flows"]["errors"] for r in results.values()) + sum(
        r["flows"]["requested"] - r["flows"]["succeeded"] for r in results.values()
    )
    path = write_json(
        NAME,
        {
            "mode": args.mode,
            "target_mb_per_process": TARGET_MB,
            "baseline": baseline,
            "backends": results,
            "rows": rows,
            "error_total": errors,
        },
        args.json,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
