"""B5 peer: the same gated refund (propose -> human approval -> execute exactly once), built
with draftgate and with LangGraph's interrupt()/Command(resume=...) on PostgresSaver.

Usage: python bench/b5_peer.py [--quick | --full] [--json PATH] [--flows N] [--concurrency C ...]

Both sides run in one process run, on one private PostgreSQL database (draftgate's schema,
migrated by Alembic, plus LangGraph's checkpoint tables) and, for draftgate, Redis (a queue
of its own), interleaved in rounds so machine noise hits both alike. Every flow refunds
25.00 USD on an order of its own (seeded for the run), so no flow waits on another's row.

- draftgate, through its real doors: ``propose_refund`` over MCP (streamable HTTP, one
  session per concurrent client, the agent's token), then as the approver over the HTTP
  API: ``GET /v1/drafts/{id}``, the params digest recomputed and the statement signed with
  Ed25519 (as ``draftgate approve`` does), ``POST .../approvals``, ``POST .../execute``,
  and ``GET /v1/executions/{id}`` every POLL_SECONDS until ``succeeded``; the refund is run
  by a real Celery worker (``draftgate serve worker``, 2 processes). API, MCP server and
  worker are separate processes (``bench/stack.py``).
- LangGraph (``bench/peers/langgraph_refund.py``): ``invoke`` until the interrupt, then
  ``invoke(Command(resume={"approved": True, ...}))`` until the graph ends; in this process.

The shop write is the same code on both sides: ``RefundAction.execute`` (order row lock,
idempotency-key look-up, the refund rules re-checked, one ``shop_refunds`` insert).

A flow's time runs from the first request to the refund recorded. After the timed rounds,
the guarantee checks run once per side (forged approval, parameters changed after the
approval was asked for, a redelivered/replayed execution, the audit trail); they are facts
observed in this run, not claims. No timing is asserted anywhere.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `service` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import httpx2
import redis
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import text
from sqlmodel import col, select

from bench.common import (
    REDIS_URL,
    CallError,
    Sample,
    percentile,
    postgres_database,
    print_table,
    quick_parser,
    row,
    write_json,
)
from bench.peers import langgraph_refund as peer
from bench.stack import bench_deployment
from harness.orders import Orders
from service.approvals.schemas import Decision, signed_request, statement_for
from service.canonical import params_sha256
from service.config import Settings
from service.db import make_engine, session_scope
from service.principal import Principal, Role
from service.shop.models import Order, Refund
from service.shop.seed import DEMO_CUSTOMER
from service.signing import generate_private_key, key_id_for, load_private_key, public_key_b64
from service.sql import rfc3339_seconds, utcnow

NAME = "b5_peer"
TENANT = "demo"
AMOUNT_MINOR = 2_500  # 25.00 USD: one approver under the reference policy
POLL_SECONDS = 0.005  # the approver's client asks for the execution's status this often
FLOW_TIMEOUT_SECONDS = 60.0
WORKER_PROCESSES = 2


@dataclass(frozen=True)
class Plan:
    flows: int  # measured flows per side and concurrency level
    warmup: int  # flows per side run first and not measured (connections, caches, imports)
    rounds: int  # the flows are run in this many alternating rounds per side
    concurrency: tuple[int, ...]
    # No round starts after this many seconds per concurrency level (both sides have then
    # run the same rounds), so a slow machine shortens the run instead of stretching it.
    seconds: float


MODES = {
    "quick": Plan(flows=12, warmup=2, rounds=2, concurrency=(1,), seconds=8),
    "full": Plan(flows=500, warmup=10, rounds=10, concurrency=(1, 4), seconds=200),
}


def refunds_with_key(engine: Any, key: str) -> list[Refund]:
    with session_scope(engine) as session:
        return list(session.exec(select(Refund).where(col(Refund.idempotency_key) == key)).all())


# --- draftgate's side: an agent over MCP, an approver over the HTTP API ---------------------


def signed_approval(
    draft: dict[str, Any], private_key: Any, approver: str, key_id: str
) -> dict[str, Any]:
    """What ``draftgate approve`` sends: the statement over the digest recomputed here."""
    digest = params_sha256(draft["params"])
    if digest != draft["params_sha256"]:
        raise CallError("digest_mismatch")
    statement = statement_for(
        draft,
        decision=Decision.APPROVE,
        approver=approver,
        key_id=key_id,
        issued_at=rfc3339_seconds(utcnow()),
        params_sha256=digest,
    )
    return signed_request(statement, private_key)


@dataclass
class DraftgateClient:
    agent: Client
    api: httpx.AsyncClient
    private_key: Any
    key_id: str  # alice's registered key
    # Seconds per step of each measured flow: where a flow's time goes.
    phases: dict[str, list[float]] = field(default_factory=dict)

    async def propose(self, order_id: str, key: str, amount_minor: int = AMOUNT_MINOR) -> str:
        result = await self.agent.call_tool(
            "propose_refund",
            {
                "order_id": order_id,
                "amount": {"amount_minor": amount_minor, "currency": "USD"},
                "reason": "damaged",
                "idempotency_key": key,
            },
        )
        if result.is_error or not result.structured_content:
            raise CallError("propose_refused", str(result.content)[:300])
        draft_id: str = result.structured_content["draft_id"]
        return draft_id

    async def approve(self, draft_id: str, forged_with: Any = None) -> httpx.Response:
        """Alice's signed approval; ``forged_with`` signs it with another key instead, still
        naming alice's registered key (what a forger who stole her token would send)."""
        draft = await self.call("GET", f"/v1/drafts/{draft_id}")
        self._mark("get_draft")
        body = signed_approval(draft, forged_with or self.private_key, "alice", self.key_id)
        response = await self.api.post(f"/v1/drafts/{draft_id}/approvals", json=body)
        self._mark("sign_and_post_approval")
        return response

    async def execute(self, draft_id: str) -> str:
        accepted = await self.call("POST", f"/v1/drafts/{draft_id}/execute")
        execution_id: str = accepted["execution_id"]
        return execution_id

    async def finished(self, execution_id: str) -> dict[str, Any]:
        deadline = time.monotonic() + FLOW_TIMEOUT_SECONDS
        while True:
            execution = await self.call("GET", f"/v1/executions/{execution_id}")
            if execution["status"] in {"succeeded", "failed", "expired"}:
                return execution
            if time.monotonic() > deadline:
                raise CallError("execution_timeout", execution_id)
            await asyncio.sleep(POLL_SECONDS)

    async def flow(self, order_id: str, key: str) -> str:
        """One whole gated refund; returns the execution id once it has succeeded."""
        self._last = time.perf_counter()
        draft_id = await self.propose(order_id, key)
        self._mark("propose_mcp")
        approved = await self.approve(draft_id)
        if approved.status_code >= 300:
            raise CallError(f"approval_{approved.status_code}", approved.text[:300])
        execution_id = await self.execute(draft_id)
        self._mark("execute_request")
        execution = await self.finished(execution_id)
        self._mark("until_succeeded")
        if execution["status"] != "succeeded":
            raise CallError(f"execution_{execution['status']}", str(execution.get("error")))
        return execution_id

    def _mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases.setdefault(phase, []).append(now - self._last)
        self._last = now

    _last: float = 0.0

    async def call(self, method: str, path: str) -> dict[str, Any]:
        response = await self.api.request(method, path)
        if response.status_code >= 300:
            raise CallError(f"http_{response.status_code}", f"{method} {path}: {response.text}")
        body: dict[str, Any] = response.json()
        return body


@asynccontextmanager
async def draftgate_client(
    stack: DraftgateStack, approver_token: str | None = None
) -> AsyncIterator[DraftgateClient]:
    manifest = stack.manifest
    token = approver_token or manifest["tokens"]["approver_alice"]
    async with AsyncExitStack() as exits:
        http = await exits.enter_async_context(
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {manifest['tokens']['agent']}"},
                timeout=httpx2.Timeout(30, read=120),
            )
        )
        agent = await exits.enter_async_context(
            Client(streamable_http_client(stack.mcp_url, http_client=http))
        )
        api = await exits.enter_async_context(
            httpx.AsyncClient(
                base_url=stack.api_url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
        )
        alice = manifest["approvers"]["alice"]
        private_key = load_private_key(Path(alice["private_key_file"]))
        assert key_id_for(public_key_b64(private_key)) == alice["key_id"]
        yield DraftgateClient(agent, api, private_key, alice["key_id"])


@dataclass
class DraftgateStack:
    deployment: Any
    manifest: dict[str, Any]
    settings: Settings
    mcp_url: str
    api_url: str
    worker_log: Path
    engine: Any
    queue: str


@contextmanager
def draftgate_stack(database_url: str, state_dir: Path) -> Iterator[DraftgateStack]:
    """MCP server, API and a Celery worker on PostgreSQL + Redis, each its own process."""
    queue = f"b5-{secrets.token_hex(6)}"
    broker_url = REDIS_URL.rstrip("/") + "/0"
    deployment = bench_deployment(state_dir, database_url, broker_url, queue)
    engine = make_engine(database_url)
    try:
        manifest = deployment.prepare()
        # All three import for seconds: side by side.
        worker = deployment.start_worker(concurrency=WORKER_PROCESSES, wait=False)
        mcp = deployment.start_http("mcp", wait=False)
        api = deployment.start_http("api", wait=False)
        for process in (mcp, api, worker):
            process.wait_ready()
        yield DraftgateStack(
            deployment,
            manifest,
            deployment.settings,
            mcp.mcp_url,
            api.base_url,
            worker.log,
            engine,
            queue,
        )
    finally:
        deployment.close()  # all signalled at once, then each awaited
        engine.dispose()
        _purge_queue(broker_url, queue)


def _purge_queue(broker_url: str, queue: str) -> None:
    client = redis.Redis.from_url(broker_url)
    try:
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    finally:
        client.close()


# --- the LangGraph peer -----------------------------------------------------------------------


@contextmanager
def langgraph_peer(database_url: str, settings: Settings, pool_size: int) -> Iterator[Any]:
    engine = make_engine(database_url)
    shop = peer.Shop(
        engine=engine,
        settings=settings,
        principal=Principal(
            tenant=TENANT,
            subject="support-agent",
            role=Role.AGENT,
            token_id="langgraph-peer",
            on_behalf_of=DEMO_CUSTOMER,
        ),
    )
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://")
    try:
        with peer.compiled(shop, conninfo, pool_size=pool_size) as graph:
            yield graph
    finally:
        engine.dispose()


def langgraph_flow(graph: Any, order_id: str, flow_id: str) -> str:
    """One whole gated refund on the peer; returns the refund id."""
    peer.start(
        graph,
        flow_id,
        {"order_id": order_id, "amount_minor": AMOUNT_MINOR, "currency": "USD",
         "reason": "damaged"},
    )  # fmt: skip
    state = peer.resume(graph, flow_id, {"approved": True, "approver": "alice"})
    if state.get("status") != "refunded":
        raise CallError("not_refunded", str(state))
    return state["refund_id"]


# --- timed runs -------------------------------------------------------------------------------


@dataclass
class Side:
    """One side's measured flows at one concurrency level, added up over the rounds."""

    sample: Sample = field(default_factory=Sample)

    def add(self, latencies: list[float], errors: dict[str, int], elapsed: float) -> None:
        self.sample.latencies.extend(latencies)
        self.sample.errors.update(errors)
        self.sample.elapsed += elapsed


async def run_draftgate(clients: Sequence[DraftgateClient], orders: list[str]) -> Sample:
    """The flows over ``len(clients)`` concurrent agent+approver pairs."""
    pending = iter(orders)
    sample = Sample()

    async def worker(client: DraftgateClient) -> None:
        for order_id in pending:
            began = time.perf_counter()
            try:
                await client.flow(order_id, f"b5-{order_id}")
            except Exception as exc:
                sample.errors[_kind(exc)] += 1
                continue
            sample.latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in clients))
    sample.elapsed = time.perf_counter() - began
    return sample


def run_langgraph(graph: Any, orders: list[str], concurrency: int) -> Sample:
    sample = Sample()

    def one(order_id: str) -> None:
        began = time.perf_counter()
        try:
            langgraph_flow(graph, order_id, f"lg-{order_id}")
        except Exception as exc:
            sample.errors[_kind(exc)] += 1
            return
        sample.latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    if concurrency == 1:
        for order_id in orders:
            one(order_id)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(one, orders))
    sample.elapsed = time.perf_counter() - began
    return sample


def _kind(exc: BaseException) -> str:
    return exc.kind if isinstance(exc, CallError) else type(exc).__name__


async def timed_runs(
    stack: DraftgateStack, graph: Any, plan: Plan, concurrency: int, orders: dict[str, Orders]
) -> tuple[dict[str, Side], dict[str, float | None]]:
    """Both sides' measured flows, and the p50 of each step of a draftgate flow (ms)."""
    sides = {"draftgate": Side(), "langgraph": Side()}
    async with AsyncExitStack() as exits:
        clients = [
            await exits.enter_async_context(draftgate_client(stack)) for _ in range(concurrency)
        ]
        await run_draftgate(clients, orders["draftgate"].take(plan.warmup * concurrency))
        run_langgraph(graph, orders["langgraph"].take(plan.warmup * concurrency), concurrency)
        for client in clients:
            client.phases.clear()
        per_round = math.ceil(plan.flows / plan.rounds)
        deadline = time.monotonic() + plan.seconds
        for number in range(plan.rounds):
            if time.monotonic() > deadline:
                break
            # Alternate who goes first, so neither side always runs on a warmer machine.
            order = ("draftgate", "langgraph") if number % 2 == 0 else ("langgraph", "draftgate")
            for name in order:
                batch = orders[name].take(per_round)
                if name == "draftgate":
                    sample = await run_draftgate(clients, batch)
                else:
                    sample = run_langgraph(graph, batch, concurrency)
                sides[name].add(sample.latencies, dict(sample.errors), sample.elapsed)
        phases: dict[str, list[float]] = {}
        for client in clients:
            for phase, seconds in client.phases.items():
                phases.setdefault(phase, []).extend(seconds)
    return sides, {
        phase: round(percentile(seconds, 50) * 1000, 2) for phase, seconds in phases.items()
    }


# --- guarantees, observed in this run ---------------------------------------------------------


async def draftgate_guarantees(stack: DraftgateStack, orders: Orders) -> dict[str, Any]:
    async with draftgate_client(stack) as client:
        return {
            "forged_approval": await _dg_forged_approval(client, orders),
            "params_changed_after_approval": await _dg_tampered_params(stack, client, orders),
            "redelivered_execution": await _dg_redelivery(stack, client, orders),
            "audit": await _dg_audit(stack, client),
        }


async def _dg_forged_approval(client: DraftgateClient, orders: Orders) -> dict[str, Any]:
    """An approval signed with a key that is not alice's registered one (a forgery)."""
    (order_id,) = orders.take(1)
    draft_id = await client.propose(order_id, f"b5-forged-{order_id}")
    refused = await client.approve(draft_id, forged_with=generate_private_key())
    executed = await client.api.post(f"/v1/drafts/{draft_id}/execute")
    return {
        "approval_status": refused.status_code,
        "approval_code": _code(refused),
        "execute_status": executed.status_code,
        "refunded": False if executed.status_code >= 300 else "see execution",
    }


async def _dg_tampered_params(
    stack: DraftgateStack, client: DraftgateClient, orders: Orders
) -> dict[str, Any]:
    """Someone with database write access raises the amount after alice signed."""
    (order_id,) = orders.take(1)
    draft_id = await client.propose(order_id, f"b5-tamper-{order_id}")
    approved = await client.approve(draft_id)
    tampered = 9_000
    with session_scope(stack.engine) as session:
        for table, key in (("drafts", "id"), ("draft_revisions", "draft_id")):
            session.execute(
                text(
                    f"UPDATE {table} SET params = jsonb_set(params::jsonb, "
                    f"'{{amount,amount_minor}}', to_jsonb(:amount))::json WHERE {key} = :draft"
                ),
                {"amount": tampered, "draft": draft_id},
            )
    executed = await client.api.post(f"/v1/drafts/{draft_id}/execute")
    outcome: dict[str, Any] = {"approval_status": approved.status_code}
    if executed.status_code < 300:
        execution = await client.finished(executed.json()["execution_id"])
        outcome["execution_status"] = execution["status"]
        outcome["error_code"] = (execution.get("error") or {}).get("code")
    else:
        outcome["execute_status"] = executed.status_code
        outcome["error_code"] = _code(executed)
    with session_scope(stack.engine) as session:
        amounts = session.exec(
            select(Refund.amount_minor)
            .join(Order, col(Order.id) == col(Refund.order_id))
            .where(col(Order.order_number) == order_id)
        ).all()
    outcome["refunded_minor"] = list(amounts)
    return outcome


async def _dg_redelivery(
    stack: DraftgateStack, client: DraftgateClient, orders: Orders
) -> dict[str, Any]:
    """A finished execution's task delivered again (as Redis does after a lost ack), and the
    execute request repeated: still one refund."""
    from celery import Celery

    from service.executions.queue import celery_config
    from service.executions.schemas import EXECUTE_TASK

    (order_id,) = orders.take(1)
    execution_id = await client.flow(order_id, f"b5-redeliver-{order_id}")
    publisher = Celery("b5-redelivery", set_as_current=False)
    publisher.conf.update(celery_config(stack.settings))
    try:
        task_id = str(publisher.send_task(EXECUTE_TASK, args=[execution_id]).id)
    finally:
        publisher.close()
    ran = await asyncio.to_thread(_wait_task_ran, stack.worker_log, task_id)
    draft = await client.call("GET", f"/v1/executions/{execution_id}")
    again = await client.api.post(f"/v1/drafts/{draft['draft_id']}/execute")
    key = f"{draft['draft_id']}:{draft.get('revision', 1)}"
    return {
        "redelivered_task_ran": ran,
        "repeat_execute_same_execution": again.json().get("execution_id") == execution_id,
        "refunds": len(refunds_with_key(stack.engine, key)),
    }


def _wait_task_ran(log: Path, task_id: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f"[{task_id}] succeeded" in log.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


async def _dg_audit(stack: DraftgateStack, client: DraftgateClient) -> dict[str, Any]:
    async with httpx.AsyncClient(
        base_url=stack.api_url,
        headers={"Authorization": f"Bearer {stack.manifest['tokens']['auditor']}"},
        timeout=120,
    ) as auditor:
        verified = (await auditor.get("/v1/audit/verify")).json()
    return {"chain_verifies": verified.get("ok"), "events": verified.get("events_checked")}


def langgraph_guarantees(graph: Any, engine: Any, orders: Orders) -> dict[str, Any]:
    return {
        "forged_approval": _lg_forged_approval(graph, orders),
        "params_changed_after_approval": _lg_tampered_params(graph, engine, orders),
        "redelivered_execution": _lg_replay(graph, engine, orders),
        "audit": _lg_audit(graph, engine, orders),
    }


def _request(order_id: str) -> peer.RefundState:
    return {"order_id": order_id, "amount_minor": AMOUNT_MINOR, "currency": "USD",
            "reason": "damaged"}  # fmt: skip


def _lg_forged_approval(graph: Any, orders: Orders) -> dict[str, Any]:
    """Whoever can call resume() approves: there is no identity or signature to check."""
    (order_id,) = orders.take(1)
    flow_id = f"lg-forged-{order_id}"
    peer.start(graph, flow_id, _request(order_id))
    state = peer.resume(graph, flow_id, {"approved": True, "approver": "mallory"})
    return {"resume_accepted": True, "refunded": state.get("status") == "refunded"}


def _lg_tampered_params(graph: Any, engine: Any, orders: Orders) -> dict[str, Any]:
    """The amount is changed in the checkpoint after the human was shown the summary."""
    (order_id,) = orders.take(1)
    flow_id = f"lg-tamper-{order_id}"
    shown = peer.start(graph, flow_id, _request(order_id))
    graph.update_state(peer.thread(flow_id), {"amount_minor": 9_000})
    state = peer.resume(graph, flow_id, {"approved": True, "approver": "alice"})
    refunds = refunds_with_key(engine, f"lg:{flow_id}")
    return {
        "summary_shown": shown["summary"],
        "refunded": state.get("status") == "refunded",
        "refunded_minor": [refund.amount_minor for refund in refunds],
    }


def _lg_replay(graph: Any, engine: Any, orders: Orders) -> dict[str, Any]:
    """The refund node run again from the checkpoint before it, as after a crash between
    the shop's commit and the checkpoint write: LangGraph re-runs the node."""
    (order_id,) = orders.take(1)
    flow_id = f"lg-replay-{order_id}"
    langgraph_flow(graph, order_id, flow_id)
    before = next(
        snapshot
        for snapshot in graph.get_state_history(peer.thread(flow_id))
        if snapshot.next == ("refund",)
    )
    replayed = graph.invoke(None, before.config)
    return {
        "node_ran_again": replayed.get("status") == "refunded",
        "refunds": len(refunds_with_key(engine, f"lg:{flow_id}")),
        "refunds_without_the_shop_key": "one per run of the node",
    }


def _lg_audit(graph: Any, engine: Any, orders: Orders) -> dict[str, Any]:
    with session_scope(engine) as session:
        checkpoints = session.execute(text("SELECT count(*) FROM checkpoints")).scalar_one()
        threads = session.execute(
            text("SELECT count(DISTINCT thread_id) FROM checkpoints")
        ).scalar_one()
    return {
        "checkpoints_per_flow": round(checkpoints / threads, 1) if threads else None,
        "hash_chained": False,
        "records_who_resumed": False,
    }


def _code(response: httpx.Response) -> str | None:
    try:
        code: str | None = response.json().get("code")
    except ValueError:
        return None
    return code


# --- output ------------------------------------------------------------------------------------


GUARANTEES = [
    ("approval is authenticated and signed", "forged_approval"),
    ("approval bound to the parameters shown", "params_changed_after_approval"),
    ("exactly once under redelivery / replay", "redelivered_execution"),
    ("tamper-evident audit of every step", "audit"),
]


def guarantee_rows(dg: dict[str, Any], lg: dict[str, Any]) -> list[dict[str, Any]]:
    forged, tampered = dg["forged_approval"], dg["params_changed_after_approval"]
    redelivery, audit = dg["redelivered_execution"], dg["audit"]
    return [
        {
            "name": "forged approval (a key that is not the approver's)",
            "draftgate": f"refused {forged['approval_status']} {forged['approval_code']}; "
            f"execute {forged['execute_status']}",
            "langgraph": "resume accepted, refunded"
            if lg["forged_approval"]["refunded"]
            else "not refunded",
        },
        {
            "name": "amount changed after the human saw it (25.00 -> 90.00)",
            "draftgate": f"execution {tampered.get('execution_status', 'refused')} "
            f"({tampered.get('error_code') or tampered.get('execute_status')}), "
            f"refunded {tampered['refunded_minor']}",
            "langgraph": f"refunded {lg['params_changed_after_approval']['refunded_minor']}",
        },
        {
            "name": "execution delivered / replayed again",
            "draftgate": f"task ran again: {redelivery['redelivered_task_ran']}, "
            f"refunds {redelivery['refunds']}",
            "langgraph": f"node ran again: {lg['redelivered_execution']['node_ran_again']}, "
            f"refunds {lg['redelivered_execution']['refunds']} (the shop's key)",
        },
        {
            "name": "audit",
            "draftgate": f"hash chain verifies: {audit['chain_verifies']} "
            f"({audit['events']} events)",
            "langgraph": f"{lg['audit']['checkpoints_per_flow']} checkpoints/flow, "
            "no hash chain, resumer not recorded",
        },
    ]


def draftgate_violations(dg: dict[str, Any]) -> list[str]:
    """What draftgate promises and this run saw broken (not timings: facts)."""
    tampered = dg["params_changed_after_approval"]
    redelivery = dg["redelivered_execution"]
    found = {
        "a forged approval was accepted": dg["forged_approval"]["approval_status"] < 300,
        "a forged approval could be executed": dg["forged_approval"]["execute_status"] < 300,
        "parameters changed after approval were refunded": bool(tampered["refunded_minor"]),
        "a redelivered task was not run": not redelivery["redelivered_task_ran"],
        "a repeated execute request made a second execution": not redelivery[
            "repeat_execute_same_execution"
        ],
        "a redelivered execution did not refund exactly once": redelivery["refunds"] != 1,
        "the audit chain does not verify": dg["audit"]["chain_verifies"] is not True,
    }
    return [problem for problem, seen in found.items() if seen]


def flow_rows(sides: dict[str, Side], concurrency: int) -> list[dict[str, Any]]:
    baseline = sides["langgraph"].sample
    return [row(f"{name} (c={concurrency})", side.sample, baseline) for name, side in sides.items()]


FLOW_COLUMNS = [
    ("name", "side"),
    ("calls", "flows"),
    ("calls_per_s", "flows/s"),
    ("p50_ms", "p50 ms/flow"),
    ("p99_ms", "p99 ms/flow"),
    ("error_total", "errors"),
    ("ratio", "flows/s vs LangGraph"),
]
GUARANTEE_COLUMNS = [("name", "check"), ("draftgate", "draftgate"), ("langgraph", "LangGraph")]


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = quick_parser(__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, help="measured flows per side and concurrency")
    parser.add_argument("--concurrency", type=int, nargs="+", help="concurrent flows per side")
    return parser.parse_args(argv)


async def measure(plan: Plan, database_url: str, state_dir: Path) -> dict[str, Any]:
    stages: dict[str, float] = {}  # wall seconds of each part of the run, where quick mode goes
    mark = time.perf_counter()
    with draftgate_stack(database_url, state_dir) as stack:
        stages["start_draftgate_s"] = round(time.perf_counter() - mark, 2)
        orders = {"draftgate": Orders(stack.engine, 7), "langgraph": Orders(stack.engine, 8)}
        checks = Orders(stack.engine, 9)
        runs: list[dict[str, Any]] = []
        phases: dict[str, Any] = {}
        with langgraph_peer(database_url, stack.settings, max(plan.concurrency)) as graph:
            for concurrency in plan.concurrency:
                sides, phases[f"c={concurrency}"] = await timed_runs(
                    stack, graph, plan, concurrency, orders
                )
                runs.extend(flow_rows(sides, concurrency))
            stages["timed_flows_s"] = round(time.perf_counter() - mark, 2) - sum(stages.values())
            lg = langgraph_guarantees(graph, stack.engine, checks)
        dg = await draftgate_guarantees(stack, checks)
        stages["guarantee_checks_s"] = round(time.perf_counter() - mark, 2) - sum(stages.values())
    stages["stop_draftgate_s"] = round(time.perf_counter() - mark, 2) - sum(stages.values())
    return {
        "stages": {name: round(seconds, 2) for name, seconds in stages.items()},
        "flows": runs,
        "draftgate_step_p50_ms": phases,
        "guarantees": {"draftgate": dg, "langgraph": lg},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = MODES[args.mode]
    if args.flows or args.concurrency:
        plan = Plan(
            flows=args.flows or plan.flows,
            warmup=plan.warmup,
            rounds=min(plan.rounds, args.flows or plan.flows),
            concurrency=tuple(args.concurrency or plan.concurrency),
            seconds=plan.seconds,
        )
    began = time.perf_counter()
    with postgres_database() as database_url, tempfile.TemporaryDirectory() as state:
        result = asyncio.run(measure(plan, database_url, Path(state)))
    guarantees = result["guarantees"]
    rows = guarantee_rows(guarantees["draftgate"], guarantees["langgraph"])
    print_table("B5: gated refund flows, draftgate vs LangGraph", result["flows"], FLOW_COLUMNS)
    print_table("B5: guarantees observed in this run", rows, GUARANTEE_COLUMNS)
    print(f"draftgate, p50 of each step of a flow (ms): {result['draftgate_step_p50_ms']}")
    errors = sum(item["error_total"] for item in result["flows"])
    violations = draftgate_violations(guarantees["draftgate"])
    path = write_json(
        NAME,
        {
            "mode": args.mode,
            "plan": plan.__dict__,
            "poll_seconds": POLL_SECONDS,
            "worker_processes": WORKER_PROCESSES,
            "wall_s": round(time.perf_counter() - began, 2),
            "rows": result["flows"],
            "error_total": errors + len(violations),
            "draftgate_guarantee_violations": violations,
            "draftgate_step_p50_ms": result["draftgate_step_p50_ms"],
            "stages": result["stages"],
            "guarantees": guarantees,
            "guarantee_table": rows,
        },
        args.json,
    )
    print(f"wrote {path} ({time.perf_counter() - began:.1f} s)")
    for violation in violations:
        print(f"draftgate guarantee violated: {violation}", file=sys.stderr)
    return 1 if errors or violations else 0


if __name__ == "__main__":
    sys.exit(main())
