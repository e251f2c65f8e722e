"""The worker's ``/metrics`` from a real Celery worker in multiprocess mode.

The worker (prefork with Redis, solo with the embedded broker) runs with
``PROMETHEUS_MULTIPROC_DIR`` and a metrics port: its pool processes count into the directory,
the main worker process answers the scrape for all of them. The API's scrape of the same run
reads the state gauges from the real database (PostgreSQL on the production stack).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.util import setup_testing_defaults

import httpx
import pytest

from harness.approvals import approve, bearer
from harness.servers import free_port
from tests.support import prometheus
from tests.support.mcp_client import connect
from tests.support.prometheus import Samples
from tests.workers.helpers import wait_for_execution, wait_until
from workers.metrics import metrics_app

pytestmark = [pytest.mark.anyio]

WORKER_METRICS_PORT = free_port()
REFUND = {
    "order_id": "ORD-1004",
    "amount": {"amount_minor": 1_500, "currency": "USD"},
    "reason": "damaged",
}


@pytest.fixture(scope="module", autouse=True)
def multiprocess_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Set before the module's worker starts (its environment is this process's)."""
    directory = tmp_path_factory.mktemp("prometheus-multiproc")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
        yield directory


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"worker_metrics_port": WORKER_METRICS_PORT}


def scrape(url: str) -> Samples:
    return prometheus.scrape(None, url)


def finished(samples: Samples, status: str) -> float:
    labels = (("action", "refund"), ("status", status))
    return samples.get(("draftgate_execution_duration_seconds_count", labels), 0.0)


async def test_the_worker_exposes_execute_to_done_for_its_pool(stack, multiprocess_dir):
    worker_url = f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics"
    before = scrape(worker_url)
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        proposed = await agent.call_tool("propose_refund", REFUND)
        assert not proposed.is_error, proposed.content
    draft_id = proposed.structured_content["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    accepted = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert accepted.status_code == 202, accepted.text
    execution = wait_for_execution(stack, accepted.json()["execution_id"])
    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]

    # The final state is counted once its transaction commits, just before the API sees it.
    wait_until(
        lambda: finished(scrape(worker_url), "succeeded") > finished(before, "succeeded"),
        timeout=30,
        message="the worker's /metrics never counted the execution",
    )
    after = scrape(worker_url)
    assert finished(after, "succeeded") - finished(before, "succeeded") == 1
    labels = (("action", "refund"), ("status", "succeeded"))
    assert after[("draftgate_execution_duration_seconds_sum", labels)] > 0
    appends = "draftgate_audit_append_duration_seconds_count"
    assert after[(appends, ())] > before.get((appends, ()), 0.0)
    assert list(multiprocess_dir.glob("*.db")), "the pool wrote no multiprocess files"

    state = scrape(f"{stack.api_url}/metrics")
    assert state[("draftgate_database_up", ())] == 1
    assert state[("draftgate_drafts", (("status", "succeeded"),))] == 1
    assert state[("draftgate_executions_queued", ())] == 0
    assert state[("draftgate_outbox_lag_seconds", ())] == 0
    if stack.settings.resolved_broker_url().startswith("redis"):  # the task was taken off it
        assert state[("draftgate_broker_queue_messages", ())] == 0
    else:
        assert ("draftgate_broker_queue_messages", ()) not in state


def test_the_worker_endpoint_serves_only_metrics_and_with_a_token_only_to_its_bearer():
    app = metrics_app("worker-scrape-0123")

    def get(path: str, authorization: str | None = None) -> tuple[str, bytes]:
        environ: dict[str, Any] = {"PATH_INFO": path}
        if authorization is not None:
            environ["HTTP_AUTHORIZATION"] = authorization
        setup_testing_defaults(environ)
        answered: list[str] = []
        body = b"".join(app(environ, lambda status, headers: answered.append(status)))
        return answered[0], body

    assert get("/metrics")[0] == "401 Unauthorized"
    assert get("/metrics", "Bearer worker-scrape-0124")[0] == "401 Unauthorized"
    status, body = get("/metrics", "Bearer worker-scrape-0123")
    assert status == "200 OK"
    assert b"draftgate_audit_append_duration_seconds" in body
    assert get("/", "Bearer worker-scrape-0123")[0] == "404 Not Found"
