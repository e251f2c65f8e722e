"""B6 the agent's loop: how soon an agent learns of an approval and of its execution's end,
pushed (``subscriptions/listen``, issue 19) against polled (``get_draft``).

    python bench/b6_agent_loop.py [--quick] [--kind embedded|redis|all]

Per kind (``redis``: PostgreSQL + Redis; ``embedded``: SQLite + the SQLite broker), the API,
the MCP server and the worker each a process of its own. One draft at a time, proposed over
MCP as a task of the 2026-07-28 tasks extension, then:

- pushed: the agent listens to the draft's resource and task; alice signs through the API
  (``approved → told``: from the approval's answer to the first ``resources/updated``), then
  requests execution (``finished → told``: from the execution's recorded ``finished_at`` to
  the ``notifications/tasks`` that completes the task with the refund id);
- polled: the same draft's twin, learned by calling ``get_draft`` (each call audited) every
  ``poll_after_seconds`` the result advises (2 s while it executes), and, as the most eager
  client could, every 0.1 s.

The baseline is the polled figure of the same run. ``execute → known`` is what the agent
waits from the execute request to holding the outcome; ``agent requests`` how many requests
it made for one draft after proposing it (the listen; or each ``get_draft``). A polled
agent's first look comes right after the approval by construction, so its ``approved →
told`` is no figure of merit.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client

from bench.common import percentile, print_table, progress, quick_parser, ratio, write_json
from bench.execution_stack import KINDS, ORDER, DraftgateStack, draftgate_stack
from harness.approvals import approve
from harness.mcp_tasks import listen, propose_as_task, tasks_client
from service.db import read_scope
from service.executions.models import Execution

CALLS = {"quick": 2, "full": 20}
EAGER_POLL_SECONDS = 0.1
DEADLINE_SECONDS = 60


def now() -> datetime:
    return datetime.now(UTC)


async def propose(agent: Client, cents: int) -> str:
    arguments = {
        "order_id": ORDER,
        "amount": {"amount_minor": cents, "currency": "USD"},
        "reason": "damaged",
    }
    created = await propose_as_task(agent, "propose_refund", arguments)
    return str(created["taskId"])


def finished_at(stack: DraftgateStack, execution_id: str) -> datetime:
    with read_scope(stack.runtime.engine) as session:
        execution = session.get(Execution, execution_id)
        assert execution is not None
        assert execution.finished_at is not None
        return execution.finished_at


async def approve_and_execute(stack: DraftgateStack, draft_id: str) -> tuple[datetime, str]:
    """Alice's signed approval, then the execute request; when the approval was answered."""
    response = await anyio.to_thread.run_sync(approve, stack.api_url, stack.demo, draft_id, "alice")
    assert response.status_code == 201, response.text
    approved = now()
    execution_id = await anyio.to_thread.run_sync(stack.request_execution, draft_id)
    return approved, execution_id


async def pushed(stack: DraftgateStack, agent: Client, cents: int) -> dict[str, float]:
    task_id = await propose(agent, cents)
    draft_id = task_id.split(".r")[0]
    wanted = {"resourceSubscriptions": [f"draftgate://drafts/{draft_id}"], "taskIds": [task_id]}
    token = stack.demo["tokens"]["agent"]
    async with listen(stack.mcp_url, token, wanted) as frames:
        await anext(frames)  # the acknowledgement
        await anext(frames)  # where the task stands now
        told_approved: datetime | None = None
        approved, execution_id = await approve_and_execute(stack, draft_id)
        requested = now()
        with anyio.fail_after(DEADLINE_SECONDS):
            async for frame in frames:
                if (
                    told_approved is None
                    and frame.get("method") == "notifications/resources/updated"
                ):
                    told_approved = now()
                if (
                    frame.get("method") == "notifications/tasks"
                    and frame["params"]["status"] == "completed"
                ):
                    told_done = now()
                    assert frame["params"]["result"]["structuredContent"]["outcome"]["refund_id"]
                    break
    assert told_approved is not None
    done = finished_at(stack, execution_id)
    return figures(approved, told_approved, requested, done, told_done, calls=1)  # the listen


async def polled(
    stack: DraftgateStack, agent: Client, cents: int, every: float | None
) -> dict[str, float]:
    """``every``: the poll interval; None follows the result's ``poll_after_seconds``."""
    task_id = await propose(agent, cents)
    draft_id = task_id.split(".r")[0]
    approved, execution_id = await approve_and_execute(stack, draft_id)
    requested = now()
    told_approved: datetime | None = None
    calls = 0
    with anyio.fail_after(DEADLINE_SECONDS):
        async for view in _views(agent, draft_id, every):
            calls += 1
            if told_approved is None and view["status"] != "proposed":
                told_approved = now()
            if view["status"] == "succeeded":
                told_done = now()
                break
    assert told_approved is not None
    done = finished_at(stack, execution_id)
    return figures(approved, told_approved, requested, done, told_done, calls=calls)


def figures(
    approved: datetime,
    told_approved: datetime,
    requested: datetime,
    done: datetime,
    told_done: datetime,
    *,
    calls: int,
) -> dict[str, float]:
    """One draft's figures: each span in seconds, and the agent's requests."""
    return {
        "approved_to_told": (told_approved - approved).total_seconds(),
        "finished_to_told": (told_done - done).total_seconds(),
        "execute_to_known": (told_done - requested).total_seconds(),
        "calls": calls,
    }


async def _views(
    agent: Client, draft_id: str, every: float | None
) -> AsyncIterator[dict[str, Any]]:
    while True:
        result = await agent.call_tool("get_draft", {"draft_id": draft_id})
        view: dict[str, Any] = result.structured_content or {}
        yield view
        await anyio.sleep(every if every is not None else view.get("poll_after_seconds") or 0)


async def measure(stack: DraftgateStack, count: int) -> list[dict[str, Any]]:
    series: dict[str, list[dict[str, float]]] = {
        "pushed": [],
        "polled (advised)": [],
        "polled (0.1 s)": [],
    }
    cents = 0
    async with tasks_client(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        for _ in range(count):
            for name, run in (
                ("pushed", lambda c: pushed(stack, agent, c)),
                ("polled (advised)", lambda c: polled(stack, agent, c, None)),
                ("polled (0.1 s)", lambda c: polled(stack, agent, c, EAGER_POLL_SECONDS)),
            ):
                cents += 1
                series[name].append(await run(cents))
    baseline = _p50(series["polled (advised)"], "execute_to_known")
    rows = []
    for name, samples in series.items():
        rows.append(
            {
                "kind": stack.kind,
                "name": name,
                "calls": len(samples),
                "approved_p50_ms": _ms(_p50(samples, "approved_to_told")),
                "finished_p50_ms": _ms(_p50(samples, "finished_to_told")),
                "finished_max_ms": _ms(max((s["finished_to_told"] for s in samples), default=None)),
                "known_p50_ms": _ms(_p50(samples, "execute_to_known")),
                "agent_calls_p50": _p50(samples, "calls"),
                "error_total": 0,
                "ratio": _round(ratio(_p50(samples, "execute_to_known"), baseline)),
            }
        )
    return rows


def _p50(samples: list[dict[str, float]], key: str) -> float | None:
    values = [sample[key] for sample in samples]
    return percentile(values, 50) if values else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


COLUMNS = [
    ("kind", "stack"),
    ("name", "how the agent learns"),
    ("calls", "drafts"),
    ("approved_p50_ms", "approved → told p50 ms"),
    ("finished_p50_ms", "finished → told p50 ms"),
    ("finished_max_ms", "finished → told max ms"),
    ("known_p50_ms", "execute → known p50 ms"),
    ("agent_calls_p50", "agent requests p50"),
    ("ratio", "execute → known vs polled (advised)"),
]


def main() -> None:
    parser = quick_parser(__doc__ or "")
    parser.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    args = parser.parse_args()
    count = CALLS[args.mode]
    kinds = KINDS if args.kind == "all" else (args.kind,)
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        workdir = Path(tempfile.mkdtemp(prefix=f"b6-{kind}-"))
        try:
            progress(f"{kind}: starting the API, MCP and worker processes")
            with draftgate_stack(kind, workdir, mcp=True) as stack:
                rows.extend(anyio.run(measure, stack, count))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    print_table("B6 the agent's loop: pushed vs polled (one draft at a time)", rows, COLUMNS)
    path = write_json(
        "b6_agent_loop", {"mode": args.mode, "drafts_per_series": count, "rows": rows}, args.json
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
