"""The production topology, proven (issue 12): ``python -m reliability.topology``.

Run as its own process, as an operator would: on a private PostgreSQL and Redis it starts
2 API, 2 MCP and 2 worker processes and beat (each ``draftgate serve ...``), drives 120
propose (MCP over streamable HTTP) -> signed approval (API) -> execute flows, 16 at a time,
restarts the workers one by one with SIGTERM mid-load, then stops PostgreSQL and Redis in
turn. No refund twice, no flow lost, the audit chain verifies and is anchored by the
checkpoints the system signs itself; readiness goes false and comes back with every process
still the same one. The full run (600 flows) is a command in docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reliability.services import find_pg_bin, missing_tools
from tests.support import services

pytestmark = pytest.mark.full

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOWS = 120
RUN_TIMEOUT_SECONDS = 300  # the run bounds itself (--timeout) a little earlier


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's figures (one run for the whole module) and, for messages, its output."""
    problems = missing_tools(find_pg_bin())
    if problems:
        services.unavailable("the topology's private PostgreSQL and Redis", "; ".join(problems))
    figures = tmp_path_factory.mktemp("topology") / "figures.json"
    command = [
        sys.executable,
        "-m",
        "reliability.topology",
        "--flows",
        str(FLOWS),
        "--concurrency",
        "16",
        "--timeout",
        str(RUN_TIMEOUT_SECONDS - 30),
        "--json",
        str(figures),
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)  # it cleans up on SIGTERM
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate(timeout=30)
        pytest.fail(f"the topology run took over {RUN_TIMEOUT_SECONDS} s:\n{output.decode()}")
    text = output.decode(errors="replace")[-8000:]
    # 0: every invariant held; 1: one did not (the tests below say which); 2: could not run.
    assert process.returncode in (0, 1), text
    report: dict[str, Any] = json.loads(figures.read_text())
    report["output"] = text
    return report


def test_every_flow_completed_exactly_once_and_the_chain_verifies(topology):
    output = topology["output"]
    assert topology["errors"] == [], output
    assert topology["flows"]["started"] == FLOWS, output
    assert topology["completed"] == FLOWS, output
    assert topology["duplicates"] == 0, output
    assert topology["lost"] == 0, output
    assert topology["refunds"] == topology["succeeded"] == topology["flows"]["total"], output
    assert topology["mismatches"] == [], output
    chain = topology["chain"]
    assert chain["ok"], (chain, output)
    assert chain["anchored"], (chain, output)
    assert chain["events_checked"] >= 5 * topology["flows"]["total"], output
    assert topology["passed"], output


def test_both_workers_were_restarted_one_by_one_with_a_warm_shutdown_mid_load(topology):
    restarts, output = topology["restarts"], topology["output"]
    assert [r["worker"] for r in restarts] == ["worker1", "worker2"], output
    for restart in restarts:
        assert restart["new_pid"], restart
        assert restart["new_pid"] != restart["old_pid"], restart
        assert restart["exit_status"] == 0, restart  # SIGTERM: warm shutdown, not killed
        assert restart["in_flight"] >= 1, restart  # flows were running when it went


def test_a_database_outage_is_a_retryable_503_and_readiness_recovers_without_restarts(
    topology,
):
    outage = topology["outages"]["database"]
    assert outage["problems"] == [], outage
    replicas = [name for name in topology["pids"] if name.startswith(("api:", "mcp:"))]
    assert sorted(outage["not_ready"]) == sorted(replicas), outage
    for seen in outage["not_ready"].values():
        assert seen["readyz"] == 503
        assert seen["checks"]["database"].startswith("unavailable"), seen
    assert sorted(outage["answers"]) == sorted(replicas), outage
    for answer in outage["answers"].values():
        assert answer["status"] == 503, answer
        assert answer["code"] == "DATABASE_UNAVAILABLE", answer
        assert answer["retryable"] is True, answer
    assert outage["recovered_seconds"] is not None, outage
    assert outage["restarted"] == [], outage  # every process kept its pid
    assert outage["flows_after"] == ["succeeded", "succeeded"], outage


def test_a_broker_outage_takes_the_api_out_and_the_outbox_keeps_what_was_requested(topology):
    outage = topology["outages"]["broker"]
    assert outage["problems"] == [], outage
    apis = [name for name in topology["pids"] if name.startswith("api:")]
    assert sorted(outage["not_ready"]) == sorted(apis), outage
    for seen in outage["not_ready"].values():
        assert seen["readyz"] == 503
        assert seen["checks"]["broker"].startswith("unavailable"), seen
    for name, answer in outage["answers"].items():  # nothing the MCP server does needs Redis
        assert name.startswith("mcp:"), outage
        assert answer["readyz"] == 200, outage
    deferred = outage["deferred"]
    assert deferred["status_while_down"] == "queued", deferred
    assert deferred["status"] == "succeeded", deferred  # published by the sweeper afterwards
    assert deferred["in_flight_at_stop_ended"] == {"succeeded": 6}, deferred
    assert outage["recovered_seconds"] is not None, outage
    assert outage["restarted"] == [], outage  # the workers reconnected, none exited
    assert outage["flows_after"] == ["succeeded"], outage
