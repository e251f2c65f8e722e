"""The production topology, proven: 2 API, 2 MCP, 2 worker processes and beat on PostgreSQL
and Redis, a few hundred concurrent propose -> approve -> execute flows through them, a
rolling restart of the workers mid-load, then PostgreSQL and Redis each stopped and started.

    ./run python -m reliability.topology                          # 200 flows, 16 at a time (CI)
    ./run python -m reliability.topology --full                   # 600 flows, 32 at a time
    ./run python -m reliability.topology --flows 400 --concurrency 24 --json figures.json

It prints flows started and completed, duplicates (refunds beyond the first per draft: must
be 0), lost (flows that did not succeed in the end: must be 0), the audit chain's
verification (anchored by the checkpoints the system itself signs), the worker restarts
(SIGTERM, warm shutdown, one at a time) and readiness through the outages. Exit status 0:
every invariant held; 1: one did not; 2: it could not run. Like the fault drill, it runs on
PostgreSQL and Redis of its own, on free loopback ports in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reliability.drill import DrillInterrupted, chain_text, interruptible, private_services, say
from reliability.figures import Figures, collect
from reliability.outages import OutageReport, broker_outage, database_outage
from reliability.replicas import Topology, readiness, topology
from reliability.services import find_pg_bin, missing_tools
from reliability.stack import DrillError

QUICK_FLOWS, QUICK_CONCURRENCY = 200, 16
FULL_FLOWS, FULL_CONCURRENCY = 600, 32
MAX_FLOWS = 700  # 1.00 USD each from one 785.00 USD order, with room for the outage flows


@dataclass
class Restart:
    worker: str
    old_pid: int | None
    new_pid: int | None
    exit_status: int | None  # of the warm shutdown; None: it had to be killed
    in_flight: int  # flows started and not finished when the SIGTERM went out
    seconds: float  # from the SIGTERM until the new worker was ready


@dataclass
class Run:
    flows: int
    concurrency: int
    started: int = 0
    completed: int = 0  # flows whose execution succeeded, as the client saw it
    outcomes: dict[str, int] = field(default_factory=dict)
    unrequested: int = 0  # flows that failed before their execution was requested
    errors: list[str] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    outages: list[OutageReport] = field(default_factory=list)
    figures: Figures = field(default_factory=lambda: Figures("topology", faults={}))
    load_seconds: float = 0.0
    wall_seconds: float = 0.0
    pids: dict[str, Any] = field(default_factory=dict)

    @property
    def lost(self) -> int:
        """Flows that did not succeed in the end: executions requested that did not succeed
        (the database's word, not the client's) and flows that never got to request one."""
        return self.figures.requested - self.figures.succeeded + self.unrequested

    @property
    def flows_total(self) -> int:
        """The load's flows and those of the outages, each an execution requested."""
        return self.figures.requested + self.unrequested

    @property
    def passed(self) -> bool:
        f = self.figures
        return (
            self.started == self.flows
            and f.duplicates == 0
            and self.lost == 0
            and f.chain_ok
            and not f.mismatches
            and not self.errors
            and len(self.restarts) == 2
            and all(r.new_pid and r.new_pid != r.old_pid for r in self.restarts)
            and len(self.outages) == 2
            and all(o.ok for o in self.outages)
        )

    def as_dict(self) -> dict[str, Any]:
        f = self.figures
        return {
            "flows": {
                "planned": self.flows,
                "started": self.started,
                "total": self.flows_total,
                "unrequested": self.unrequested,
            },
            "completed": self.completed,
            "succeeded": f.succeeded,
            "outcomes": self.outcomes,
            "duplicates": f.duplicates,
            "lost": self.lost,
            "refunds": f.refunds,
            "chain": f.chain,
            "chain_ok": f.chain_ok,
            "restarts": [asdict(r) for r in self.restarts],
            "outages": {o.service: o.as_dict() for o in self.outages},
            "attempts": f.attempts,
            "republished": f.republished,
            "mismatches": f.mismatches,
            "http_statuses": f.http_statuses,
            "client_retries": f.client_retries,
            "errors": self.errors,
            "concurrency": self.concurrency,
            "load_seconds": self.load_seconds,
            "flows_per_second": round(self.started / self.load_seconds, 1)
            if self.load_seconds
            else 0.0,
            "wall_seconds": self.wall_seconds,
            "pids": self.pids,
            "passed": self.passed,
        }


class Load:
    """``flows`` flows, ``concurrency`` at a time, and the rolling restart in the middle."""

    def __init__(self, top: Topology, run: Run) -> None:
        self.top = top
        self.run = run
        self.finished = 0
        self._lock = threading.Lock()

    def drive(self) -> None:
        restarter = threading.Thread(target=self._rolling_restart, name="rolling-restart")
        restarter.start()
        started = time.monotonic()
        with ThreadPoolExecutor(self.run.concurrency, thread_name_prefix="flow") as pool:
            for _ in pool.map(self._flow, range(self.run.flows)):
                pass
        self.run.load_seconds = round(time.monotonic() - started, 1)
        restarter.join()

    def _flow(self, index: int) -> None:
        with self._lock:
            self.run.started += 1
        requested, outcome = None, "error"
        try:
            requested = self.top.client.request_execution(index)
            self.top.record(requested)
            outcome = self.top.client.wait_finished(requested.execution_id)
        except Exception as error:  # reported with the figures, never hidden
            self.run.errors.append(f"flow {index}: {type(error).__name__}: {error}")
        with self._lock:
            self.run.unrequested += requested is None
            self.finished += 1
            self.run.outcomes[outcome] = self.run.outcomes.get(outcome, 0) + 1
            self.run.completed += outcome == "succeeded"

    def _rolling_restart(self) -> None:
        """SIGTERM one worker (warm shutdown: it finishes what it runs, acks_late returns
        what it only held), start its replacement, wait until it consumes, then the next:
        after a fifth and after two fifths of the flows, so that both restarts (each takes
        seconds: a new process starts) happen while flows are in flight."""
        for number, worker in enumerate(self.top.workers, start=1):
            mark = self.run.flows * number // 5
            while self.finished < mark and self.finished < self.run.flows:
                time.sleep(0.05)
            in_flight = self.run.started - self.finished
            old_pid, began = worker.pid, time.monotonic()
            say(f"  rolling restart: SIGTERM {worker.name} ({in_flight} flows in flight)")
            status = worker.stop()
            try:
                worker.start()
            except RuntimeError as error:
                self.run.errors.append(f"{worker.name} did not come back: {error}")
                return
            seconds = round(time.monotonic() - began, 1)
            self.run.restarts.append(
                Restart(worker.name, old_pid, worker.pid, status, in_flight, seconds)
            )


def execute(run: Run, base: Path, pg_bin: Path) -> Run:
    """Start everything, drive the load, stop PostgreSQL and then Redis, count."""
    with private_services(base, pg_bin, "topology.log") as (ledger, postgres, redis):
        began = time.monotonic()
        with topology(base / "topology", postgres=postgres, redis=redis, ledger=ledger) as top:
            say(f"topology ready in {time.monotonic() - began:.1f} s: {top.pids()}")
            run.pids = top.pids()
            _wait_ready(top)
            say(f"{run.flows} flows, {run.concurrency} at a time")
            Load(top, run).drive()
            say(f"load done in {run.load_seconds} s: {run.outcomes}")
            run.outages.append(database_outage(top, run.flows))
            say(f"database outage: {_outage_text(run.outages[-1])}")
            run.outages.append(broker_outage(top, run.flows + 10))
            say(f"broker outage: {_outage_text(run.outages[-1])}")
            _count(top, run)
    return run


def _wait_ready(top: Topology, timeout: float = 60) -> None:
    """What a load balancer waits for: every replica's /readyz at 200 (the first needs the
    first checkpoint signed: readiness reports an unanchored audit log)."""
    deadline = time.monotonic() + timeout
    servers = [*top.apis, *top.mcps]
    while not all(readiness(s.url)[0] == 200 for s in servers):
        if time.monotonic() > deadline:
            states = {s.name: readiness(s.url) for s in servers}
            raise DrillError(f"the replicas did not become ready: {states}")
        time.sleep(0.2)


def _count(top: Topology, run: Run) -> None:
    top.anchored_head()
    run.figures.chain = top.client.verify_audit()
    collect(top.runtime.engine, top.execution_ids(), run.figures)
    run.figures.http_statuses = {str(k): v for k, v in sorted(top.client.stats.statuses.items())}
    run.figures.client_retries = top.client.stats.retries


# --- output -----------------------------------------------------------------------------------


def _outage_text(o: OutageReport) -> str:
    verdict = "ok" if o.ok else "; ".join(o.problems)
    return f"down {o.down_seconds} s, ready again after {o.recovered_seconds} s, {verdict}"


def render(run: Run, console: Console) -> None:
    f = run.figures
    table = Table(title=f"draftgate production topology ({run.wall_seconds} s)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("flows started", f"{run.started} (+{run.flows_total - run.started} in the outages)"),
        ("flows completed", str(run.completed)),
        ("executions succeeded", f"{f.succeeded} of {f.requested}"),
        ("duplicates", str(f.duplicates)),
        ("lost", str(run.lost)),
        ("audit chain", chain_text(f)),
        ("worker restarts (SIGTERM)", ", ".join(_restart_text(r) for r in run.restarts)),
        *[(f"{o.service} outage", _outage_text(o)) for o in run.outages],
        ("load", f"{run.load_seconds} s, {run.concurrency} concurrent"),
        ("attempts / republished", f"{f.attempts} / {f.republished}"),
        ("client retries", str(f.client_retries)),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for problem in [*f.mismatches, *run.errors]:
        console.print(f"  ! {problem}", markup=False)
    verdict = "PASSED" if run.passed else "FAILED"
    console.print(f"{verdict}: duplicates {f.duplicates}, lost {run.lost}, chain {chain_text(f)}")


def _restart_text(r: Restart) -> str:
    return f"{r.worker} exit {r.exit_status} ({r.in_flight} in flight, back in {r.seconds} s)"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reliability.topology", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--flows", type=int, default=None, help=f"flows ({QUICK_FLOWS})")
    parser.add_argument(
        "--concurrency", type=int, default=None, help=f"at a time ({QUICK_CONCURRENCY})"
    )
    parser.add_argument("--full", action="store_true", help=f"{FULL_FLOWS} flows")
    parser.add_argument("--timeout", type=float, default=600.0, help="whole-run limit, seconds")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    parser.add_argument("--pg-bin", default=None, help="directory of initdb and pg_ctl")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    flows = args.flows or (FULL_FLOWS if args.full else QUICK_FLOWS)
    concurrency = args.concurrency or (FULL_CONCURRENCY if args.full else QUICK_CONCURRENCY)
    if not 1 <= flows <= MAX_FLOWS:
        print(f"--flows must be between 1 and {MAX_FLOWS}", file=sys.stderr)
        return 2
    pg_bin = find_pg_bin(args.pg_bin)
    problems = missing_tools(pg_bin)
    if problems:
        print("cannot run the topology: " + "; ".join(problems), file=sys.stderr)
        return 2
    assert pg_bin is not None
    run = Run(flows, concurrency)
    base = Path(tempfile.mkdtemp(prefix="draftgate-topology-"))
    started = time.monotonic()
    try:
        with interruptible(args.timeout):
            execute(run, base, pg_bin)
    except (DrillError, RuntimeError) as error:
        run.errors.append(f"{type(error).__name__}: {error}")
    finally:
        run.wall_seconds = round(time.monotonic() - started, 1)
        if args.keep:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    report = run.as_dict()
    render(run, Console(width=140))
    print(json.dumps(report, default=str))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if run.passed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, DrillInterrupted) as stopped:
        print(f"topology stopped ({type(stopped).__name__} {stopped}); cleaned up", file=sys.stderr)
        sys.exit(130)
