"""The peer: the same gated refund built the way LangGraph's human-in-the-loop docs show.

A ``StateGraph`` of three nodes — ``propose`` (check the refund, write the summary a human
reads), ``human_approval`` (``interrupt()`` with that summary; the human's answer comes back
as ``Command(resume={...})``) and ``refund`` (the shop write) — compiled with a
``PostgresSaver`` checkpointer, one ``thread_id`` per flow.

For a fair comparison the peer does exactly what draftgate's worker does to the shop: its
``propose`` node runs draftgate's own ``RefundAction.validate`` and its ``refund`` node runs
``RefundAction.execute`` (lock the order, look up the idempotency key, re-check the refund
rules, the simulated payment provider, one ``shop_refunds`` insert) in one transaction on
the same PostgreSQL schema. The idempotency key is ``lg:<thread_id>``: LangGraph re-runs a
node from its start after a crash or a replay, so its docs ask for idempotent side
effects — the shop's unique key is what makes the peer's refund happen once.

What the peer does NOT have, because LangGraph does not offer it: the resume value is
whatever the caller passes (no authentication or signature, nothing binds it to the
parameters shown), and the checkpoints are plain rows (no hash chain, no audit of refusals).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool
from sqlalchemy.engine import Engine

from service.config import Settings
from service.db import session_scope
from service.principal import Principal
from service.registry.base import ActionContext
from service.shop.definitions import RefundAction
from service.shop.schemas import RefundInput
from service.sql import utcnow


class RefundState(TypedDict, total=False):
    order_id: str
    amount_minor: int
    currency: str
    reason: str
    summary: str
    decision: dict[str, Any]
    refund_id: str
    status: str  # proposed | rejected | refunded


Graph = CompiledStateGraph[RefundState, None, RefundState, RefundState]


@dataclass(frozen=True)
class Shop:
    """What the nodes need to reach draftgate's shop: its database and whom they act for."""

    engine: Engine
    settings: Settings
    principal: Principal  # the agent acting for the customer, as draftgate's token says


def build_graph(shop: Shop) -> StateGraph[RefundState]:
    refund_action = RefundAction()

    def context(session: Any) -> ActionContext:
        return ActionContext(
            session=session, principal=shop.principal, settings=shop.settings, now=utcnow()
        )

    def params(state: RefundState) -> RefundInput:
        # As draftgate's worker parses stored params: strict, from JSON.
        return RefundInput.model_validate_json(
            json.dumps(
                {
                    "order_id": state["order_id"],
                    "amount": {
                        "amount_minor": state["amount_minor"],
                        "currency": state["currency"],
                    },
                    "reason": state["reason"],
                }
            )
        )

    def propose(state: RefundState) -> RefundState:
        with session_scope(shop.engine) as session:
            preview = refund_action.validate(context(session), params(state))
        return {"summary": preview.summary, "status": "proposed"}

    def human_approval(state: RefundState) -> Command[Literal["refund", "__end__"]]:
        # Everything before interrupt() runs again on resume: keep it free of side effects.
        decision = interrupt({"question": "Approve this refund?", "summary": state["summary"]})
        if decision.get("approved"):
            return Command(goto="refund", update={"decision": decision})
        # END is typed str, the Literal (which draws the graph's edges) says "__end__".
        return Command(goto=END, update={"decision": decision, "status": "rejected"})  # type: ignore[arg-type]

    def refund(state: RefundState, config: RunnableConfig) -> RefundState:
        key = "lg:" + config["configurable"]["thread_id"]
        with session_scope(shop.engine) as session:
            outcome = refund_action.execute(context(session), params(state), key)
        return {"refund_id": outcome.data["refund_id"], "status": "refunded"}

    builder = StateGraph(RefundState)
    builder.add_node("propose", propose)
    builder.add_node("human_approval", human_approval)
    builder.add_node("refund", refund)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "human_approval")
    builder.add_edge("refund", END)
    return builder


@contextmanager
def compiled(shop: Shop, conninfo: str, *, pool_size: int = 4) -> Iterator[Graph]:
    """The graph on a ``PostgresSaver`` over a connection pool (the docs' production
    setup; the saver's connection settings are the ones ``from_conn_string`` uses)."""
    with ConnectionPool(
        conninfo,
        min_size=pool_size,
        max_size=pool_size,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
    ) as pool:
        checkpointer = PostgresSaver(pool)  # type: ignore[arg-type]
        checkpointer.setup()
        yield build_graph(shop).compile(checkpointer=checkpointer)


def thread(flow_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": flow_id}}


def start(graph: Graph, flow_id: str, request: RefundState) -> dict[str, Any]:
    """Run the flow until the human is asked; returns the interrupt's payload."""
    result = graph.invoke(request, thread(flow_id))
    interrupts = result.get("__interrupt__") or []
    if not interrupts:
        raise RuntimeError(f"flow {flow_id} did not stop for approval: {result}")
    payload: dict[str, Any] = interrupts[0].value
    return payload


def resume(graph: Graph, flow_id: str, decision: dict[str, Any]) -> RefundState:
    """Give the human's decision back to the paused flow; returns the final state."""
    state: RefundState = graph.invoke(Command(resume=decision), thread(flow_id))  # type: ignore[assignment]
    return state
