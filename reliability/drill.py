"""The fault drill: executions end to end on private PostgreSQL + Redis with real worker
processes, while workers are SIGKILLed, Redis and PostgreSQL restart and messages are lost.

    ./run python -m reliability.drill                 # 100 executions per scenario
    ./run python -m reliability.drill --quick         # a few per scenario (what CI runs)
    ./run python -m reliability.drill --executions 300 --kills 60 --scenario sigkill

It prints one row per scenario: executions requested, succeeded, failed (visible business
failures), duplicates (downstream refunds beyond the first for one execution: must be 0),
lost (requested executions that never finished: must be 0) and the audit chain's
verification. Exit status 0: every scenario kept those invariants; 1: one did not; 2: the
drill could not run. Nothing shared is touched: the drill starts its own PostgreSQL and
Redis on free loopback ports in a temporary directory, and removes them at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import create_engine

from reliability.figures import Figures, apply_client_stats, collect, verify_chain
from reliability.processes import Ledger, start_watchdog
from reliability.scenarios import SCENARIOS, Plan, Scenario, unfinished, wait_settled
from reliability.services import (
    PrivatePostgres,
    PrivateRedis,
    find_pg_bin,
    missing_tools,
)
from reliability.stack import Stack, scenario_stack
from service.migrate import upgrade

TEMPLATE = "drill_template"
QUICK = Plan(executions=4, kills=3, max_uptime_seconds=2.5, finish_timeout_seconds=90)
FULL_KILLS = 40


class DrillInterrupted(BaseException):
    """SIGTERM, SIGHUP or the drill's own time limit: clean up and stop."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m reliability.drill", description=__doc__.split("\n\n")[0]
    )
    names = [s.name for s in SCENARIOS]
    parser.add_argument("--executions", type=int, default=100, help="per scenario (100)")
    parser.add_argument(
        "--kills", type=int, default=None, help=f"most SIGKILLs in sigkill ({FULL_KILLS})"
    )
    parser.add_argument("--quick", action="store_true", help="the short version CI runs")
    parser.add_argument(
        "--scenario", action="append", choices=names, help="run only these (repeatable)"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--timeout", type=float, default=None, help="whole-drill limit, seconds")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    parser.add_argument("--pg-bin", default=None, help="directory of initdb and pg_ctl")
    return parser.parse_args(argv)


def plan_of(args: argparse.Namespace) -> Plan:
    if args.quick:
        return QUICK
    return Plan(executions=args.executions, kills=FULL_KILLS if args.kills is None else args.kills)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_of(args)
    pg_bin = find_pg_bin(args.pg_bin)
    problems = missing_tools(pg_bin)
    if problems:
        print("cannot run the drill: " + "; ".join(problems), file=sys.stderr)
        return 2
    assert pg_bin is not None
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 30)
    scenarios = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    timeout = args.timeout or (300.0 if args.quick else 3600.0)
    base = Path(tempfile.mkdtemp(prefix="draftgate-drill-"))
    started = time.monotonic()
    with interruptible(timeout):
        try:
            results = _run(scenarios, plan, seed, base, pg_bin)
        finally:
            if args.keep:
                print(f"kept {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
    report = {
        "seed": seed,
        "plan": plan.__dict__,
        "wall_seconds": round(time.monotonic() - started, 1),
        "scenarios": [f.as_dict() for f in results],
    }
    print(render(results, report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if all(f.passed for f in results) else 1


def _run(
    scenarios: list[Scenario], plan: Plan, seed: int, base: Path, pg_bin: Path
) -> list[Figures]:
    """Start the private servers, run each scenario on its own database, stop everything."""
    with private_services(base, pg_bin, "drill.log") as (ledger, postgres, redis):
        _migrate_template(postgres)
        rng = random.Random(seed)  # noqa: S311 - fault timing, not secrets
        return [
            run_scenario(s, plan, rng, base=base, postgres=postgres, redis=redis, ledger=ledger)
            for s in scenarios
        ]


@contextlib.contextmanager
def private_services(
    base: Path, pg_bin: Path, log_name: str
) -> Iterator[tuple[Ledger, PrivatePostgres, PrivateRedis]]:
    """A run's log, its ledger and watchdog (which cleans up if this process dies), and its
    private PostgreSQL and Redis, started; everything stopped when the block ends."""
    log_to(base / log_name)
    ledger = Ledger(base / "ledger.json")
    watchdog = start_watchdog(base, ledger)
    postgres = PrivatePostgres(base / "postgres", pg_bin)
    redis = PrivateRedis(base / "redis")
    try:
        say(f"private PostgreSQL on 127.0.0.1:{postgres.port}, Redis on 127.0.0.1:{redis.port}")
        ledger.add("commands", postgres.cleanup_command())
        postgres.start()
        redis.start()
        ledger.add("pids", redis.pid)
        yield ledger, postgres, redis
    finally:
        with contextlib.suppress(Exception):
            redis.kill()
        with contextlib.suppress(Exception):
            postgres.stop("immediate")
        watchdog.kill()
        watchdog.wait(timeout=10)


def _migrate_template(postgres: PrivatePostgres) -> None:
    started = time.monotonic()
    url = postgres.create_database(TEMPLATE)
    upgrade(url)
    create_engine(url).dispose()
    say(f"migrated the template database in {time.monotonic() - started:.1f} s")


def run_scenario(
    scenario: Scenario,
    plan: Plan,
    rng: random.Random,
    *,
    base: Path,
    postgres: PrivatePostgres,
    redis: PrivateRedis,
    ledger: Ledger,
) -> Figures:
    """Run one scenario, let the system settle, and count what it left behind."""
    started = time.monotonic()
    figures = Figures(scenario.name, faults={})
    say(f"[{scenario.name}] {scenario.title}: {plan.executions} executions")
    with (
        scenario_stack(
            scenario.name,
            base,
            postgres=postgres,
            redis=redis,
            template=TEMPLATE,
            ledger=ledger,
            timing=scenario.timing,
        ) as stack,
        _progress(stack),
    ):
        try:
            figures.faults = scenario.run(stack, plan, rng)
        except Exception as exc:
            logging.getLogger("reliability").exception("scenario %s", scenario.name)
            figures.drill_errors.append(f"{type(exc).__name__}: {exc}")
            if not postgres.accepts_connections():  # a scenario that died mid-outage
                postgres.start()
        figures.drill_errors += figures.faults.pop("load_errors", [])
        last_request = max((r.at for r in stack.requested), default=time.monotonic())
        wait_settled(stack, plan.finish_timeout_seconds)
        figures.settle_seconds = round(time.monotonic() - last_request, 1)
        _count(stack, figures)
    figures.wall_seconds = round(time.monotonic() - started, 1)
    say(f"[{scenario.name}] done in {figures.wall_seconds:.0f} s: {summary(figures)}")
    return figures


def _count(stack: Stack, figures: Figures) -> None:
    try:
        figures.chain = verify_chain(stack)
        collect(stack.runtime.engine, stack.execution_ids(), figures)
    except Exception as exc:
        logging.getLogger("reliability").exception("counting %s", figures.scenario)
        figures.drill_errors.append(f"counting failed: {type(exc).__name__}: {exc}")
    apply_client_stats(stack, figures)


# --- output -----------------------------------------------------------------------------------

COLUMNS = ("scenario", "requested", "succeeded", "failed", "duplicates", "lost", "audit chain")


def summary(f: Figures) -> str:
    return (
        f"{f.requested} requested, {f.succeeded} succeeded, {f.failed} failed, "
        f"{f.duplicates} duplicates, {f.lost} lost, chain {chain_text(f)}"
    )


def chain_text(f: Figures) -> str:
    chain = f.chain
    if not chain:
        return "not verified"
    if not chain.get("ok"):
        return f"BROKEN at seq {chain.get('first_bad_seq')}: {chain.get('problem')}"
    anchored = "anchored" if chain.get("anchored") else "NOT anchored"
    return f"verified, {chain.get('events_checked')} events, {anchored}"


def render(results: list[Figures], report: dict[str, Any]) -> str:
    rows = [COLUMNS] + [
        (
            f.scenario,
            str(f.requested),
            str(f.succeeded),
            str(f.failed),
            str(f.duplicates),
            str(f.lost),
            chain_text(f),
        )
        for f in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["", f"draftgate fault drill (seed {report['seed']}, {report['wall_seconds']} s)"]
    for number, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)
        ]
        lines.append("  ".join([*cells, row[-1]]))
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for f in results:
        lines += [f"{f.scenario}: " + details(f)]
        lines += [f"  ! {problem}" for problem in [*f.mismatches, *f.drill_errors]]
        lines += [f"  ! unfinished: {u}" for u in f.unfinished]
        lines += [f"  failed: {x['execution_id']}: {x['error']}" for x in f.failures]
        lines += [f"  HTTP {k} looked like {v!r}" for k, v in f.http_5xx_samples.items()]
    verdict = "PASSED" if all(f.passed for f in results) else "FAILED"
    lines += ["", f"{verdict}: duplicates 0, lost 0 and a verified chain in every scenario"]
    return "\n".join(lines)


def details(f: Figures) -> str:
    faults = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in f.faults.items())
    statuses = " ".join(f"{k}x{v}" for k, v in f.http_statuses.items())
    beat = ", ".join(f"{k} x{v}" for k, v in f.beat_errors.items()) or "none"
    return (
        f"{faults}; {f.refunds} refunds; {f.attempts} attempts ({f.lost_attempts} lost to a "
        f"dead worker); {f.republished} republished by the sweeper; settled "
        f"{f.settle_seconds} s after the last request, slowest execution "
        f"{f.max_finish_seconds:.1f} s; HTTP {statuses}; client retries {f.client_retries}; "
        f"beat errors {beat}; {f.wall_seconds} s"
    )


# --- plumbing ---------------------------------------------------------------------------------


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def log_to(path: Path) -> None:
    """Everything the services log goes to a file: the terminal shows progress and figures."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


@contextlib.contextmanager
def _progress(stack: Stack, every: float = 10.0) -> Iterator[None]:
    stop = threading.Event()
    started = time.monotonic()

    def report() -> None:
        while not stop.wait(every):
            with contextlib.suppress(Exception):
                left = unfinished(stack)
                say(
                    f"  [{stack.label}] {time.monotonic() - started:.0f} s: "
                    f"{len(stack.requested)} requested, {left} unfinished"
                )

    thread = threading.Thread(target=report, name="drill-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@contextlib.contextmanager
def interruptible(timeout: float) -> Iterator[None]:
    """SIGTERM, SIGHUP and the time limit unwind like Ctrl-C, so every finally block runs."""

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise DrillInterrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (KeyboardInterrupt, DrillInterrupted) as stopped:
        print(f"drill stopped ({type(stopped).__name__} {stopped}); cleaned up", file=sys.stderr)
        traceback.print_exc(limit=1)
        sys.exit(130)
