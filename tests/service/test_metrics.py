"""Prometheus metrics of the core and the API's ``/metrics`` (docs/metrics.md).

The API runs in-process on SQLite; the executions run through the real runner in this
process, so the live metrics they feed are this process's (plain mode, one registry). Values
are compared as differences: the registry lives as long as the test process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import delete
from sqlmodel import col, select

from harness.approvals import signed_decision
from mcp_adapter.tools import ToolDoor
from service import metrics
from service.api.app import create_app
from service.approvals.models import Approval
from service.config import Settings
from service.db import session_scope
from service.drafts.models import Draft, DraftStatus
from service.executions.runner import run_execution
from service.runtime import build_runtime
from service.tracing import new_trace_id
from tests.support import prometheus
from tests.support.api_client import bearer, in_process
from tests.support.prometheus import Samples, value

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"
REFUND = {
    "order_id": "ORD-1004",
    "amount": {"amount_minor": 2_500, "currency": "USD"},
    "reason": "damaged",
}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


def scrape(api: httpx.Client, **headers: str) -> Samples:
    return prometheus.scrape(api, "/metrics", headers)


def approve(api: httpx.Client, demo: dict[str, Any], draft_id: str, who: str) -> httpx.Response:
    token = demo["tokens"][f"approver_{who}"]
    draft = api.get(f"/v1/drafts/{draft_id}", headers=bearer(token)).json()
    body = signed_decision(draft, approver=who, key_file=demo["approvers"][who]["private_key_file"])
    return api.post(f"/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token))


def test_a_propose_approve_execute_flow_moves_every_documented_metric(api, runtime, demo):
    before = scrape(api)
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = door.call("propose_refund", REFUND, new_trace_id(), None)["draft_id"]
    proposed = scrape(api)
    assert value(proposed, "draftgate_drafts", status="proposed") == 1
    assert value(proposed, "draftgate_database_up") == 1

    assert approve(api, demo, draft_id, "alice").status_code == 201
    # A second approval of an approved draft is refused and audited: one refusal, by its code.
    refused = approve(api, demo, draft_id, "bob")
    assert refused.status_code == 409
    reason = refused.json()["code"]
    alice = bearer(demo["tokens"]["approver_alice"])
    accepted = api.post(f"/v1/drafts/{draft_id}/execute", headers=alice)
    assert accepted.status_code == 202, accepted.text
    queued = scrape(api)
    assert value(queued, "draftgate_drafts", status="queued") == 1
    assert value(queued, "draftgate_executions_queued") == 1
    assert value(queued, "draftgate_outbox_lag_seconds") >= 0

    result = run_execution(runtime, accepted.json()["execution_id"])
    assert result.status == "succeeded"
    after = scrape(api)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("draftgate_approval_latency_seconds_count", action="refund") == 1
    assert value(after, "draftgate_approval_latency_seconds_sum", action="refund") > 0
    assert grew("draftgate_refusals_total", reason=reason) == 1
    assert grew("draftgate_execution_duration_seconds_count", action="refund", status="succeeded")
    # proposal, approval, refusal, execution request, start, success: six committed appends
    assert grew("draftgate_audit_append_duration_seconds_count") >= 6
    assert value(after, "draftgate_drafts", status="succeeded") == 1
    assert value(after, "draftgate_drafts", status="queued") == 0
    assert value(after, "draftgate_executions_queued") == 0
    # Every status is always there, so a dashboard never sees a series vanish.
    assert {labels for name, labels in after if name == "draftgate_drafts"} == {
        (("status", status.value),) for status in DraftStatus
    }


def test_a_refused_execution_counts_as_failed_and_as_a_refusal_by_its_code(api, runtime, demo):
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = door.call("propose_refund", REFUND, new_trace_id(), None)["draft_id"]
    assert approve(api, demo, draft_id, "alice").status_code == 201
    alice = bearer(demo["tokens"]["approver_alice"])
    accepted = api.post(f"/v1/drafts/{draft_id}/execute", headers=alice)
    assert accepted.status_code == 202, accepted.text
    with session_scope(runtime.engine) as session:  # someone with DB access removes the proof
        session.execute(delete(Approval).where(col(Approval.draft_id) == draft_id))
    before = scrape(api)

    assert run_execution(runtime, accepted.json()["execution_id"]).status == "failed"
    after = scrape(api)
    failed = {"action": "refund", "status": "failed"}
    name = "draftgate_execution_duration_seconds_count"
    assert value(after, name, **failed) - value(before, name, **failed) == 1
    refusals = "draftgate_refusals_total"
    unverified = {"reason": "APPROVALS_UNVERIFIED"}
    assert value(after, refusals, **unverified) - value(before, refusals, **unverified) == 1
    assert value(after, "draftgate_drafts", status="failed") == 1


def test_a_request_without_a_valid_token_counts_as_unauthenticated(api):
    before = scrape(api)
    assert api.get("/v1/drafts", headers=bearer("not-a-token")).status_code == 401
    after = scrape(api)
    reason = {"reason": "UNAUTHENTICATED"}
    name = "draftgate_refusals_total"
    assert value(after, name, **reason) - value(before, name, **reason) == 1


def test_an_observation_counts_only_when_its_unit_of_work_commits(runtime, demo, api):
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = door.call("propose_refund", REFUND, new_trace_id(), None)["draft_id"]
    name = "draftgate_approval_latency_seconds_count"
    before = value(scrape(api), name, action="refund")

    def quorum_then(fail: bool) -> None:
        with session_scope(runtime.engine) as session:
            draft = session.exec(select(Draft).where(col(Draft.id) == draft_id)).one()
            metrics.quorum_reached(session, draft, draft.created_at)
            if fail:
                raise RuntimeError("the unit fails after its quorum was reached")

    with pytest.raises(RuntimeError):
        quorum_then(fail=True)
    assert value(scrape(api), name, action="refund") == before
    quorum_then(fail=False)
    assert value(scrape(api), name, action="refund") == before + 1


def test_labels_are_bounded_to_the_catalogue():
    assert metrics.bounded_code("ORDER_UNAVAILABLE") == "ORDER_UNAVAILABLE"
    assert metrics.bounded_code("ORD-1004 please refund") == metrics.OTHER_CODE
    assert metrics.bounded_code(None) == metrics.OTHER_CODE
    assert metrics.outcome_of(ValueError("boom")) == "INTERNAL_ERROR"
    assert metrics.outcome_of(None) == "ok"


def test_scraping_with_the_database_down_answers_200_with_database_up_0(tmp_path: Path):
    settings = Settings(
        state_dir=tmp_path / "state",
        database_url="postgresql+psycopg://postgres@127.0.0.1:9/nowhere?connect_timeout=2",
    )
    runtime = build_runtime(settings)
    try:
        with in_process(create_app(runtime)) as client:
            samples = scrape(client)
    finally:
        runtime.engine.dispose()
    assert value(samples, "draftgate_database_up") == 0
    assert not any(name == "draftgate_drafts" for name, _ in samples)


def test_with_a_metrics_token_a_scrape_needs_it(settings):
    runtime = build_runtime(settings.model_copy(update={"metrics_token": "scrape-0123456789"}))
    try:
        with in_process(create_app(runtime)) as client:
            refused = client.get("/metrics")
            assert refused.status_code == 401
            assert refused.json()["code"] == "UNAUTHENTICATED"
            assert client.get("/metrics", headers=bearer("scrape-0123456780")).status_code == 401
            assert scrape(client, **bearer("scrape-0123456789"))
    finally:
        runtime.engine.dispose()


def test_metrics_is_not_in_the_openapi_document(api):
    assert "/metrics" not in api.get("/openapi.json").json()["paths"]


def test_every_metric_is_documented_and_every_documented_metric_exists():
    documented = set(re.findall(r"^\| `(draftgate_[a-z_]+)` \|", DOCS.read_text(), re.M))
    assert documented == metrics.metric_names()
