"""PostgreSQL and then Redis stop under the running topology, and come back.

While the database is away, every replica's ``/readyz`` answers 503 naming the database, and
API requests and MCP tool calls get a retryable ``503 DATABASE_UNAVAILABLE``. While Redis is
away, the API replicas are not ready (the broker check), yet a flow still goes through up to
its execute request: the outbox keeps the hand-off and the sweeper publishes it once Redis is
back. In both cases readiness returns and flows work again with no process restarted.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from sqlmodel import Session, col, func, select

from harness.processes import HttpProcess
from reliability.replicas import FINISHED, Topology, readiness
from reliability.stack import ORDER
from service.executions.models import FINISHED as FINISHED_STATUSES
from service.executions.models import Execution, ExecutionStatus

OUTAGE_PROBE_SECONDS = 30  # how long a replica may take to see the outage
RECOVERY_SECONDS = 90  # how long every replica may take to be ready again
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
IN_FLIGHT = 6  # executions requested together just before Redis stops


@dataclass
class OutageReport:
    service: str  # "database" or "broker"
    down_seconds: float = 0.0
    not_ready: dict[str, Any] = field(default_factory=dict)  # replica: what /readyz said
    answers: dict[str, Any] = field(default_factory=dict)  # replica: a request's answer
    recovered_seconds: float | None = None  # from the stop until every replica was ready
    deferred: dict[str, Any] = field(default_factory=dict)  # broker: the execution held back
    flows_after: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # processes whose pid changed
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def database_outage(top: Topology, first_index: int) -> OutageReport:
    report = OutageReport("database")
    before = top.pids()
    servers = [*top.apis, *top.mcps]
    started = time.monotonic()
    top.postgres.stop("fast")
    try:
        report.not_ready = _wait_not_ready(servers, "database", report)
        for api in top.apis:
            report.answers[api.name] = _api_answer(top, api)
        for mcp in top.mcps:
            report.answers[mcp.name] = _mcp_answer(top, mcp)
    finally:
        report.down_seconds = round(time.monotonic() - started, 1)
        top.postgres.start()
    for name, answer in report.answers.items():
        if (answer["status"], answer["code"], answer["retryable"]) != (
            503,
            "DATABASE_UNAVAILABLE",
            True,
        ):
            report.problems.append(f"{name} answered {answer} while the database was away")
    _recover(top, report, started, before, first_index, flows=2)
    return report


def broker_outage(top: Topology, first_index: int) -> OutageReport:
    report = OutageReport("broker")
    before = top.pids()
    in_flight = _executions_in_flight(top, first_index, report)
    started = time.monotonic()
    top.redis.stop()
    try:
        report.not_ready = _wait_not_ready(top.apis, "broker", report)
        for mcp in top.mcps:  # the MCP server needs no broker: it stays in the pool
            status, checks = readiness(mcp.url)
            report.answers[mcp.name] = {"readyz": status, "checks": checks}
            if status != 200:
                report.problems.append(f"{mcp.name} not ready without Redis: {checks}")
        report.deferred.update(_execute_while_down(top, first_index + IN_FLIGHT, report))
    finally:
        report.down_seconds = round(time.monotonic() - started, 1)
        top.redis.start()
        top.ledger.add("pids", top.redis.pid)
    _recover(top, report, started, before, first_index + IN_FLIGHT + 1, flows=1)
    execution_id = report.deferred.get("execution_id")
    if execution_id:
        report.deferred["status"] = top.client.wait_finished(execution_id)
        if report.deferred["status"] != "succeeded":
            report.problems.append(f"the execution requested without Redis: {report.deferred}")
    ends = [top.client.wait_finished(e) for e in in_flight]
    report.deferred["in_flight_at_stop_ended"] = dict(Counter(ends))
    if any(end != "succeeded" for end in ends):
        report.problems.append(f"executions running when Redis stopped ended {ends}")
    return report


def _executions_in_flight(top: Topology, first_index: int, report: OutageReport) -> list[str]:
    """Approved drafts executed all at once, and the moment a worker runs one: Redis stops
    while workers hold unacknowledged messages (acks_late), the case that once made a
    worker exit instead of reconnecting."""
    client = top.client
    drafts = [client.propose(first_index + n) for n in range(IN_FLIGHT)]
    for draft_id in drafts:
        client.approve(draft_id)
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        responses = list(pool.map(client.execute, drafts))
    top.record(*responses)
    ids = [r.execution_id for r in responses]
    deadline = time.monotonic() + OUTAGE_PROBE_SECONDS
    while not _any_started(top, ids) and time.monotonic() < deadline:
        time.sleep(0.01)
    report.deferred["unfinished_at_stop"] = _unfinished(top, ids)
    return ids


def _any_started(top: Topology, ids: list[str]) -> bool:
    with Session(top.runtime.engine) as session:
        statement = select(func.count()).where(
            col(Execution.id).in_(ids), col(Execution.status) != ExecutionStatus.QUEUED
        )
        return int(session.exec(statement).one()) > 0


def _unfinished(top: Topology, ids: list[str]) -> int:
    with Session(top.runtime.engine) as session:
        statement = select(func.count()).where(
            col(Execution.id).in_(ids), col(Execution.status).not_in(list(FINISHED_STATUSES))
        )
        return int(session.exec(statement).one())


def _execute_while_down(top: Topology, index: int, report: OutageReport) -> dict[str, Any]:
    """A whole flow up to its execute request while Redis is away: the agent proposes (MCP),
    an approver signs and requests execution (API: 202, the outbox keeps the hand-off)."""
    requested = top.client.request_execution(index)
    top.record(requested)
    response = top.client.next_http().get(
        f"/v1/executions/{requested.execution_id}", headers=_bearer(top, "approver_alice")
    )
    status = response.json().get("status") if response.status_code == 200 else None
    if status in FINISHED:
        report.problems.append(f"finished although Redis was away: {requested.execution_id}")
    return {"execution_id": requested.execution_id, "status_while_down": status}


def _recover(
    top: Topology,
    report: OutageReport,
    started: float,
    before: dict[str, int | None],
    first_index: int,
    *,
    flows: int,
) -> None:
    """Every replica ready again without a restart, and new flows go through."""
    servers = [*top.apis, *top.mcps]
    deadline = time.monotonic() + RECOVERY_SECONDS
    while not all(readiness(s.url)[0] == 200 for s in servers):
        if time.monotonic() > deadline:
            report.problems.append(
                "not ready again: " + str({s.name: readiness(s.url) for s in servers})
            )
            break
        time.sleep(0.2)
    else:
        report.recovered_seconds = round(time.monotonic() - started, 1)
    report.flows_after = [top.flow(first_index + n) for n in range(flows)]
    if any(status != "succeeded" for status in report.flows_after):
        report.problems.append(f"flows after recovery: {report.flows_after}")
    after = top.pids()
    report.restarted = [
        name for name in before if before[name] != after.get(name) or not _alive(top, name)
    ]
    if report.restarted:
        report.problems.append(f"restarted or gone: {report.restarted}")


def _alive(top: Topology, name: str) -> bool:
    return any(c.name == name and c.alive for c in top.components)


def _wait_not_ready(servers: list[HttpProcess], check: str, report: OutageReport) -> dict[str, Any]:
    """What each replica's /readyz says once it sees the outage (503, ``check`` not ok)."""
    seen: dict[str, Any] = {}
    deadline = time.monotonic() + OUTAGE_PROBE_SECONDS
    for server in servers:
        while True:
            status, checks = readiness(server.url)
            if status == 503 and checks.get(check, "ok") != "ok":
                seen[server.name] = {"readyz": status, "checks": checks}
                break
            if time.monotonic() > deadline:
                report.problems.append(f"{server.name} still says {status} {checks}")
                break
            time.sleep(0.1)
    return seen


def _api_answer(top: Topology, api: HttpProcess) -> dict[str, Any]:
    """An approver's request to this replica, once, without retrying."""
    response = httpx.get(f"{api.url}/v1/drafts", headers=_bearer(top, "approver_alice"), timeout=15)
    return _answer(response)


def _mcp_answer(top: Topology, mcp: HttpProcess) -> dict[str, Any]:
    """A tool call to this replica (stateless streamable HTTP: one POST), once."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "get_order", "arguments": {"order_id": ORDER}},
    }
    headers = {**MCP_HEADERS, **_bearer(top, "agent")}
    response = httpx.post(f"{mcp.url}/mcp", json=call, headers=headers, timeout=15)
    return _answer(response)


def _answer(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = {}
    return {
        "status": response.status_code,
        "code": body.get("code") if isinstance(body, dict) else None,
        "retryable": body.get("retryable") if isinstance(body, dict) else None,
        "retry_after": response.headers.get("retry-after"),
    }


def _bearer(top: Topology, token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {top.demo['tokens'][token]}"}
