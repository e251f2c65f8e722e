"""``draftgate dev`` keeps its stack running: a real ``draftgate dev`` process tree whose
components are SIGKILLed, made to crash on every start, or kept from ever answering."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from harness.approvals import approve, bearer
from harness.dev import DevRun, children_of
from harness.dev import draftgate_dev as dev_run
from tests.support.mcp_client import connect

pytestmark = pytest.mark.full

START_TIMEOUT_SECONDS = 180  # a liveness bound on a shared machine, not a speed claim
BACK_WITHIN_SECONDS = 30
SETTLED_WITHIN_SECONDS = 120


def wait_for(dev: DevRun, condition: Callable[[], Any], what: str, seconds: float) -> Any:
    return dev.wait_for(condition, what, seconds)


@contextmanager
def draftgate_dev(
    tmp_path: Path, *args: str, announced: bool = True, **env: str
) -> Iterator[DevRun]:
    """``draftgate dev`` in ``tmp_path`` (its state dir and log there), ready unless told not."""
    with dev_run(tmp_path / "state", tmp_path / "dev.log", *args, ready=announced, **env) as dev:
        yield dev


def with_sitecustomize(tmp_path: Path, code: str) -> str:
    """A PYTHONPATH whose sitecustomize runs ``code`` first in every Python process of dev's."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(code)
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))


def stop(dev: DevRun) -> int:
    return dev.interrupt()[0]


# --- the agent and the approver -----------------------------------------------------------------


# Each refund on an order of its own: refunds on one order bind its state, so a second one
# approved before the first ran would rightly be refused SOURCE_CHANGED.
REFUNDED_ORDERS = ("delivered", "shipped", "paid")


async def propose_refunds(dev: DevRun, manifest: dict[str, Any], amounts: list[int]) -> list[str]:
    drafts = []
    async with connect(dev.mcp_url, manifest["tokens"]["agent"]) as agent:
        for number, amount in enumerate(amounts):
            result = await agent.call_tool(
                "propose_refund",
                {
                    "order_id": manifest["orders"][REFUNDED_ORDERS[number]],
                    "amount": {"amount_minor": amount, "currency": "USD"},
                    "reason": "damaged",
                    "idempotency_key": f"supervision-{number}",
                },
            )
            assert not result.is_error, result.content
            drafts.append(result.structured_content["draft_id"])
    return drafts


def as_alice(dev: DevRun, manifest: dict[str, Any], method: str, path: str, expect: int) -> Any:
    """The API's JSON answer to Alice's request, which must have status ``expect``."""
    answer = httpx.request(
        method,
        dev.api_url + path,
        headers=bearer(manifest["tokens"]["approver_alice"]),
        timeout=30,
    )
    assert answer.status_code == expect, answer.text
    return answer.json()


def approve_and_execute(dev: DevRun, manifest: dict[str, Any], draft_id: str) -> str:
    approved = approve(dev.api_url, manifest, draft_id, "alice")
    assert approved.status_code == 201, approved.text
    execution_id: str = as_alice(dev, manifest, "POST", f"/v1/drafts/{draft_id}/execute", 202)[
        "execution_id"
    ]
    return execution_id


def execution_status(dev: DevRun, manifest: dict[str, Any], execution_id: str) -> str:
    status: str = as_alice(dev, manifest, "GET", f"/v1/executions/{execution_id}", 200)["status"]
    return status


def refunds_of(db: sqlite3.Connection, draft_id: str) -> int:
    """The shop's refunds made for the draft (its idempotency key is <draft_id>:<revision>)."""
    count: int = db.execute(
        "SELECT count(*) FROM shop_refunds WHERE idempotency_key LIKE ?", (f"{draft_id}:%",)
    ).fetchone()[0]
    return count


def applied_but_not_recorded(dev: DevRun, draft_id: str) -> bool:
    """The shop made the refund, and the execution is still running: the window between the
    change and its record that DRAFTGATE_FAULT_PAUSE_AFTER_DOWNSTREAM_MS holds open."""
    with closing(dev.database()) as db:
        refunds = refunds_of(db, draft_id)
        [status] = db.execute(
            "SELECT status FROM executions WHERE draft_id = ?", (draft_id,)
        ).fetchone() or [None]
    return bool(refunds == 1 and status == "running")


def api_answers(dev: DevRun, manifest: dict[str, Any]) -> None:
    assert httpx.get(dev.api_url + "/healthz", timeout=10).status_code == 200
    as_alice(dev, manifest, "GET", "/v1/drafts", 200)


def kill_worker(dev: DevRun) -> int:
    """SIGKILL the worker; return the pid of the one dev starts in its place."""
    killed = dev.component_pid("worker")
    assert killed is not None, dev.output()
    # dev runs the worker on the embedded broker with the solo pool: it has no prefork child
    # to kill separately (serve worker passes --pool=solo for sqla+ brokers).
    assert children_of(killed) == [], "a solo worker forks no pool processes"
    os.kill(killed, signal.SIGKILL)
    return int(
        wait_for(
            dev,
            lambda: (pid := dev.component_pid("worker")) not in (None, killed) and pid,
            "worker back",
            BACK_WITHIN_SECONDS,
        )
    )


# --- tests ----------------------------------------------------------------------------------------

# Short enough that a killed worker's running execution is taken over within seconds.
RECOVERY_ENV = {
    "DRAFTGATE_EXECUTION_LEASE_SECONDS": "8",
    "DRAFTGATE_REPUBLISH_AFTER_SECONDS": "1",
    "DRAFTGATE_SWEEP_INTERVAL_SECONDS": "1",
    "DRAFTGATE_FAULT_PAUSE_AFTER_DOWNSTREAM_MS": "1500",
}


def test_a_killed_worker_is_restarted_and_every_execution_ends_exactly_once(tmp_path):
    with draftgate_dev(tmp_path, **RECOVERY_ENV) as dev:
        manifest = dev.manifest()
        drafts = anyio.run(propose_refunds, dev, manifest, [1_000, 1_100, 1_200])
        executions = {draft: approve_and_execute(dev, manifest, draft) for draft in drafts}

        # Killed mid-flight: the first refund is made, its record not yet written.
        wait_for(dev, lambda: applied_but_not_recorded(dev, drafts[0]), "refund in flight", 60)
        first_replacement = kill_worker(dev)
        api_answers(dev, manifest)  # the API never went away
        # And killed again right after it came back.
        kill_worker(dev)
        api_answers(dev, manifest)
        assert first_replacement != dev.component_pid("worker")

        def settled() -> bool:
            statuses = [execution_status(dev, manifest, e) for e in executions.values()]
            return all(status in ("succeeded", "failed", "expired") for status in statuses)

        wait_for(dev, settled, "final executions", SETTLED_WITHIN_SECONDS)
        statuses = {d: execution_status(dev, manifest, e) for d, e in executions.items()}
        assert set(statuses.values()) == {"succeeded"}, statuses
        with closing(dev.database()) as db:
            for draft in drafts:
                refunds = refunds_of(db, draft)
                runs = db.execute(
                    "SELECT count(*) FROM executions WHERE draft_id = ?", (draft,)
                ).fetchone()[0]
                succeeded = db.execute(
                    "SELECT count(*) FROM audit_events WHERE type = 'execution.succeeded'"
                    " AND draft_id = ?",
                    (draft,),
                ).fetchone()[0]
                assert (refunds, runs, succeeded) == (1, 1, 1), draft
        assert dev.process.poll() is None, "dev kept running"
        assert stop(dev) == 0, dev.output()

    notices = re.findall(
        r"^worker stopped \(killed by SIGKILL\); restarting it in .*$", dev.output(), re.M
    )
    assert len(notices) == 2, dev.output()
    assert "restarting it in 1 s (death 1 within 120 s" in notices[0]
    assert "restarting it in 2 s (death 2 within 120 s" in notices[1]
    assert "Traceback" not in dev.output()


# Makes `serve worker` exit at once (before importing anything) once the mark file exists, so
# the worker starts normally, then dies on every start dev makes after the test creates it.
CRASHING_WORKER = """
import os, sys
if "serve" in sys.argv and "worker" in sys.argv and os.path.exists(os.environ["CRASH_MARK"]):
    os._exit(3)
"""


def test_a_component_that_keeps_dying_stops_dev_with_its_log(tmp_path):
    pythonpath = with_sitecustomize(tmp_path, CRASHING_WORKER)
    mark = tmp_path / "crash"
    with draftgate_dev(tmp_path, PYTHONPATH=pythonpath, CRASH_MARK=str(mark)) as dev:
        manifest = dev.manifest()
        mark.touch()
        worker = dev.component_pid("worker")
        assert worker is not None
        os.kill(worker, signal.SIGTERM)
        # Restarted after 1, 2, 4 and 8 s, dying each time: the 5th death stops dev.
        api_answers(dev, manifest)  # while the worker crashes, the rest still serves
        code = dev.process.wait(timeout=120)

    output = dev.output()
    assert code == 1, output
    assert "worker stopped (exit code 3); restarting it in 8 s (death 4 within 120 s" in output
    assert "worker keeps dying (5 times within 120 s); stopping" in output
    assert "worker's log (" in output
    assert "--- draftgate dev: exit code 3; restarting in 8 s" in output  # the log's tail


# Keeps the API child from ever answering: it waits for a signal before importing anything.
SILENT_API = """
import signal, sys
if "serve" in sys.argv and "api" in sys.argv:
    print("api: waiting forever", flush=True)
    signal.pause()
"""


def test_not_ready_within_the_ready_timeout_names_the_component_and_its_log(tmp_path):
    pythonpath = with_sitecustomize(tmp_path, SILENT_API)
    with draftgate_dev(
        tmp_path, "--ready-timeout", "5", announced=False, PYTHONPATH=pythonpath
    ) as dev:
        code = dev.process.wait(timeout=120)

    output = dev.output()
    assert code == 1, output
    assert "not ready after 5 s (--ready-timeout): api" in output
    assert "api's log (" in output
    assert "  api: waiting forever" in output
    assert "Press Ctrl-C to stop." not in output
