"""The auditor's HTTP API over the log: who may read it, filters, cursors, exports (docs/audit.md).

The API runs in-process (``httpx.ASGITransport``, tests/support/api_client.py); the export
streamed while the log grows is read from a real uvicorn server. Who may read the log and the
refusal of malformed input run on SQLite; everything the SQL decides (filters, time windows,
cursors, limits, concurrent appends, exports) runs on SQLite and on PostgreSQL. Expected
results are computed from the database rows, independently of the service's own query code,
and hashes are recomputed from the documented construction with ``rfc8785``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
import rfc8785
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.audit import actions as audit
from service.audit.models import AuditEvent
from service.db import session_scope
from service.errors import DomainError
from service.principal import Role
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.api_client import bearer, in_process, served
from tests.support.backends import both_backends

PROBLEM_JSON = "application/problem+json"
TENANT = "demo"
HASHED = ("seq", "at", "tenant", "actor", "type", "draft_id", "execution_id", "trace_id", "data")
EXPORT_KEYS = {*HASHED, "prev_hash", "hash"}
GENESIS = "0" * 64
# Every auditor route, with the operation name its refusal is audited under.
AUDITOR_ROUTES = [
    ("/v1/audit/events", "audit.query"),
    ("/v1/audit/export", "audit.export"),
    ("/v1/audit/verify", "audit.verify"),
    ("/v1/audit/checkpoints", "audit.checkpoints"),
    ("/v1/traces/" + "ab" * 16, "trace"),
]
NOT_AUDITORS = ["agent", "approver_alice", "admin"]


# --- fixtures and helpers -------------------------------------------------------------------


@pytest.fixture
def api(runtime, demo) -> Iterator[httpx.Client]:
    with in_process(create_app(runtime)) as client:
        yield client


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def as_exported(event: AuditEvent) -> dict[str, Any]:
    """A database row as docs/audit.md says an export line must look."""
    return {
        "seq": event.seq,
        "at": rfc3339(event.at),
        "tenant": event.tenant,
        "actor": event.actor,
        "type": event.type,
        "draft_id": event.draft_id,
        "execution_id": event.execution_id,
        "trace_id": event.trace_id,
        "data": event.data,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def documented_hash(line: dict[str, Any]) -> str:
    body = {name: line[name] for name in (*HASHED, "prev_hash")}
    return hashlib.sha256(b"draftgate.audit.v1\n" + rfc8785.dumps(body)).hexdigest()


def db_events(runtime, tenant: str = TENANT) -> list[AuditEvent]:
    with Session(runtime.engine) as session:
        statement = (
            select(AuditEvent).where(col(AuditEvent.tenant) == tenant).order_by(col(AuditEvent.seq))
        )
        return list(session.exec(statement).all())


def auditor(demo) -> dict[str, str]:
    return bearer(demo["tokens"]["auditor"])


def get(
    api: httpx.Client, path: str, headers: dict[str, str] | None, **params: Any
) -> httpx.Response:
    query = {k: v for k, v in params.items() if v is not None}
    return api.get(path, params=query, headers=headers or {})


def all_pages(api: httpx.Client, demo, *, limit: int = 100, **filters: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    cursor = None
    while True:
        response = get(
            api, "/v1/audit/events", auditor(demo), limit=limit, cursor=cursor, **filters
        )
        assert response.status_code == 200, response.text
        page = response.json()
        assert set(page) == {"events", "next_cursor"}
        assert len(page["events"]) <= limit
        events += page["events"]
        cursor = page["next_cursor"]
        if cursor is None:
            return events
        assert page["events"], "a page with a next cursor has events"


def export_lines(api: httpx.Client, demo, **filters: Any) -> list[dict[str, Any]]:
    response = get(api, "/v1/audit/export", auditor(demo), **filters)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].split(";")[0] == "application/x-ndjson"
    assert response.text.endswith("\n") or response.text == ""
    return [json.loads(line) for line in response.text.splitlines()]


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0] == PROBLEM_JSON
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert isinstance(body["retryable"], bool)
    return body


def assert_one_refusal_each(runtime, before: int, code: str, *, count: int) -> None:
    """Every refused request is an audit event (docs/audit.md), and nothing else happened."""
    new = [e for e in db_events(runtime) if e.seq > before]
    assert len(new) == count, [e.type for e in new]
    for event in new:
        assert event.type.endswith(".refused")
        assert event.actor == "auditor:audrey"
        assert event.data["error"]["code"] == code


def cursor_of(value: Any) -> str:
    """A cursor that has the shape of the service's but was never handed out by it."""
    raw = json.dumps({"after": value}).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def record(runtime, **values: Any) -> None:
    with session_scope(runtime.engine) as session:
        audit.record(session, tenant=values.pop("tenant", TENANT), **values)


@pytest.fixture
def varied_log(runtime, demo, door) -> dict[str, Any]:
    """A log with every filterable field populated in different ways, spread over time."""
    trace_a, trace_b = new_trace_id(), new_trace_id()
    door.call("list_orders", {}, trace_a, None)
    draft = door.call(
        "propose_refund",
        {
            "order_id": demo["orders"]["delivered"],
            "amount": {"amount_minor": 1_200, "currency": "USD"},
            "reason": "damaged",
        },
        trace_a,
        None,
    )
    door.call(
        "propose_cancel_order",
        {"order_id": demo["orders"]["paid"], "reason": "customer_request"},
        trace_b,
        None,
    )
    with pytest.raises(DomainError):
        door.call("get_order", {"order_id": 42}, trace_b, None)
    door.call("get_draft", {"draft_id": draft["draft_id"]}, trace_b, None)
    record(
        runtime,
        actor="system:worker",
        type="execution.started",
        draft_id=draft["draft_id"],
        execution_id="exe_test1",
        trace_id=trace_a,
        data={"attempt": 1},
    )
    record(runtime, actor="system:worker", type="execution.started", execution_id="exe_test2")
    record(runtime, actor="approver:alice", type="test.note", data={"n": 1})
    # Another tenant's events never show up in the demo auditor's answers.
    record(runtime, tenant="acme", actor="approver:alice", type="test.note", trace_id=trace_a)
    return {"trace_a": trace_a, "trace_b": trace_b, "draft_id": draft["draft_id"]}


# --- who may read the log -------------------------------------------------------------------


def test_only_auditors_may_use_the_auditor_routes_and_refusals_are_audited(runtime, demo, api):
    for path, operation in AUDITOR_ROUTES:
        before = db_events(runtime)[-1].seq

        for name in NOT_AUDITORS:
            response = get(api, path, bearer(demo["tokens"][name]))
            assert response.status_code == 403, (path, name, response.text)
            body = assert_problem(response, 403, "PERMISSION_DENIED")
            assert body["category"] == "permission_denied"
            assert "auditor" in body["detail"]

        refusals = [e for e in db_events(runtime) if e.seq > before]
        assert [(e.type, e.actor) for e in refusals] == [
            (f"{operation}.refused", "agent:support-agent"),
            (f"{operation}.refused", "approver:alice"),
            (f"{operation}.refused", "admin:root"),
        ], path
        for event in refusals:
            assert event.data["error"]["code"] == "PERMISSION_DENIED"
            assert len(event.trace_id or "") == 32


def test_a_refused_export_streams_nothing(runtime, demo, api, door):
    door.call("list_orders", {}, new_trace_id(), None)

    response = get(api, "/v1/audit/export", bearer(demo["tokens"]["approver_alice"]))

    assert_problem(response, 403, "PERMISSION_DENIED")
    assert "tool.called" not in response.text
    assert not [e for e in db_events(runtime) if e.type == "audit.exported"]


def test_no_or_an_unknown_token_is_401_and_audited_as_anonymous(runtime, demo, api):
    unknown = "dg_" + "x" * 43
    for path, _operation in AUDITOR_ROUTES:
        before = db_events(runtime)[-1].seq

        missing = get(api, path, None)
        wrong = get(api, path, bearer(unknown))

        for response in (missing, wrong):
            assert response.status_code == 401, (path, response.text)
            assert_problem(response, 401, "UNAUTHENTICATED")
            assert response.headers["www-authenticate"].lower().startswith("bearer")
        new = [e for e in db_events(runtime) if e.seq > before]
        assert [(e.type, e.actor) for e in new] == [("auth.refused", "anonymous")] * 2, path
        assert unknown not in json.dumps([e.data for e in new])
        prefix = hashlib.sha256(unknown.encode()).hexdigest()[:12]
        assert new[1].data["token_sha256_prefix"] == prefix


@both_backends
def test_an_auditor_of_another_tenant_sees_only_its_own_chain(runtime, demo, api, door):
    trace_id = new_trace_id()
    door.call("list_orders", {}, trace_id, None)
    record(runtime, tenant="acme", actor="approver:zed", type="test.acme")
    with session_scope(runtime.engine) as session:
        acme = tokens.issue(
            session, tenant="acme", subject="auditor-acme", role=Role.AUDITOR, actor="test"
        ).token

    seen = all_pages(api, {"tokens": {"auditor": acme}})
    exported = export_lines(api, {"tokens": {"auditor": acme}})

    acme_events = [as_exported(e) for e in db_events(runtime, "acme")]
    assert [e["type"] for e in seen] == ["test.acme", "token.issued"]
    assert seen == acme_events[:2]
    # Nothing of demo, and the chain up to (not including) the export's own event.
    assert exported == acme_events[:-1]
    assert acme_events[-1]["type"] == "audit.exported"
    assert get(api, f"/v1/traces/{trace_id}", bearer(acme)).status_code == 404
    assert get(api, f"/v1/traces/{trace_id}", auditor(demo)).status_code == 200


# --- filters --------------------------------------------------------------------------------


@both_backends
def test_without_filters_every_event_of_the_tenant_is_listed_oldest_first(
    runtime, demo, api, varied_log
):
    listed = all_pages(api, demo)

    assert listed == [as_exported(e) for e in db_events(runtime)]
    assert [e["seq"] for e in listed] == list(range(1, len(listed) + 1))


@both_backends
def test_each_field_filter_returns_exactly_the_matching_events(runtime, demo, api, varied_log):
    events = db_events(runtime)  # reading the log is not audited: it is the same throughout
    for field in ("type", "actor", "draft_id", "execution_id", "trace_id"):
        values = {getattr(e, field) for e in events if getattr(e, field) is not None}
        assert len(values) >= 2, f"the fixture log needs several {field} values"

        for value in sorted(values):
            listed = all_pages(api, demo, limit=2, **{field: value})
            expected = [as_exported(e) for e in events if getattr(e, field) == value]
            assert listed == expected, f"{field}={value}"
        assert all_pages(api, demo, **{field: "no-such-value"}) == [], field
    assert db_events(runtime) == events


@both_backends
def test_filters_combine(runtime, demo, api, varied_log):
    trace_a = varied_log["trace_a"]

    listed = all_pages(api, demo, trace_id=trace_a, type="tool.called", actor="agent:support-agent")

    expected = [
        e.seq
        for e in db_events(runtime)
        if (e.trace_id, e.type, e.actor) == (trace_a, "tool.called", "agent:support-agent")
    ]
    assert [e["seq"] for e in listed] == expected
    assert len(expected) == 2


ZONES = [
    UTC,  # spelled "Z"
    timezone(timedelta(hours=5, minutes=30)),
    timezone(timedelta(hours=-8)),
    timezone(timedelta(hours=14)),
]


def spelled(moment: datetime, zone: timezone) -> str:
    """RFC 3339 in the given zone, with ``Z`` for UTC."""
    text = moment.astimezone(zone).isoformat()
    return text.replace("+00:00", "Z") if zone is UTC else text


@both_backends
def test_since_is_inclusive_and_until_exclusive_in_any_zone(runtime, demo, api, varied_log):
    events = db_events(runtime)
    moments = sorted({e.at for e in events})
    assert len(moments) >= 4, "the fixture log spans several distinct instants"
    since, until = moments[1], moments[-2]

    for zone in ZONES:
        listed_since = all_pages(api, demo, since=spelled(since, zone))
        listed_until = all_pages(api, demo, until=spelled(until, zone))
        listed_both = all_pages(api, demo, since=spelled(since, zone), until=spelled(until, zone))

        assert [e["seq"] for e in listed_since] == [e.seq for e in events if e.at >= since], zone
        assert [e["seq"] for e in listed_until] == [e.seq for e in events if e.at < until], zone
        assert [e["seq"] for e in listed_both] == [
            e.seq for e in events if since <= e.at < until
        ], zone
        assert listed_since[0]["at"] == rfc3339(since)  # inclusive: the event at `since` itself
        assert all(e["at"] != rfc3339(until) for e in listed_until)  # exclusive


@both_backends
def test_an_empty_or_inverted_time_window_returns_nothing(runtime, demo, api, varied_log):
    moments = sorted({e.at for e in db_events(runtime)})
    at = spelled(moments[2], UTC)
    later = spelled(moments[3], UTC)

    assert all_pages(api, demo, since=at, until=at) == []
    assert all_pages(api, demo, since=later, until=at) == []
    assert all_pages(api, demo, since=spelled(moments[-1] + timedelta(seconds=1), UTC)) == []


def test_a_time_without_a_zone_or_not_a_time_is_400(runtime, demo, api):
    for name in ("since", "until"):
        for value in (
            "2026-11-30T10:00:00",  # naive
            "2026-11-30T10:00:00.123456",  # naive, with microseconds
            "yesterday",
            "2026-13-01T00:00:00Z",  # month 13
        ):
            before = db_events(runtime)[-1].seq

            for path in ("/v1/audit/events", "/v1/audit/export"):
                response = get(api, path, auditor(demo), **{name: value})
                assert response.status_code == 400, (path, name, value, response.text)
                body = assert_problem(response, 400, "INVALID_ARGUMENT")
                assert name in body["detail"]
            assert_one_refusal_each(runtime, before, "INVALID_ARGUMENT", count=2)


@both_backends
def test_a_time_outside_the_representable_range_is_a_client_error_not_a_crash(demo, api):
    """BUG: converting these to UTC overflows and the API answers 500."""
    for name in ("since", "until"):
        for value in (
            "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
            "9999-12-31T23:59:59-14:00",  # after year 9999 in UTC
        ):
            response = get(api, "/v1/audit/events", auditor(demo), **{name: value})

            assert response.status_code in (200, 400), (name, value, response.text)
            if response.status_code == 400:
                assert_problem(response, 400, "INVALID_ARGUMENT")


def test_malformed_filters_are_400(demo, api):
    for params in (
        {"type": "t" * 65},
        {"trace_id": "a" * 33},
        {"limit": "ten"},
    ):
        response = get(api, "/v1/audit/events", auditor(demo), **params)
        assert response.status_code == 400, (params, response.text)
        assert_problem(response, 400, "INVALID_ARGUMENT")


def test_non_auditors_get_403_even_with_invalid_filters(runtime, demo, api):
    """DOUBTFUL: filters are validated before the role is checked, so a non-auditor learns
    the API's validation rules (400) instead of being turned away (403), and nothing is
    audited for the FastAPI-level ones. docs/audit.md: "anyone else gets 403"."""
    for path in ("/v1/audit/events", "/v1/audit/export"):
        for params in ({"since": "2026-11-30T10:00:00"}, {"limit": 501}):
            response = get(api, path, bearer(demo["tokens"]["approver_alice"]), **params)

            assert response.status_code == 403, (path, params, response.text)
            assert_problem(response, 403, "PERMISSION_DENIED")


# --- limits and cursors ---------------------------------------------------------------------


@both_backends
def test_limit_is_capped_at_500(runtime, demo, api):
    with session_scope(runtime.engine) as session:
        for index in range(520):
            audit.record(
                session, tenant=TENANT, actor="test:bulk", type="test.bulk", data={"i": index}
            )
    total = len(db_events(runtime))

    first = get(api, "/v1/audit/events", auditor(demo), limit=500).json()
    rest = get(api, "/v1/audit/events", auditor(demo), limit=500, cursor=first["next_cursor"])

    assert len(first["events"]) == 500
    assert first["next_cursor"]
    assert [e["seq"] for e in first["events"] + rest.json()["events"]] == list(range(1, total + 1))
    assert rest.json()["next_cursor"] is None
    for limit in (501, 0, -1, 10_000):
        assert_problem(
            get(api, "/v1/audit/events", auditor(demo), limit=limit), 400, "INVALID_ARGUMENT"
        )


@both_backends
def test_a_small_limit_pages_through_everything_with_an_opaque_cursor(
    runtime, demo, api, varied_log
):
    events = db_events(runtime)
    cursors: list[str] = []
    seen: list[int] = []
    cursor = None
    while True:
        page = get(api, "/v1/audit/events", auditor(demo), limit=3, cursor=cursor).json()
        seen += [e["seq"] for e in page["events"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
        cursors.append(cursor)

    assert seen == [e.seq for e in events]
    assert len(cursors) == (len(events) - 1) // 3
    assert all(isinstance(c, str) and c.isascii() and str(i) != c for i, c in enumerate(cursors))
    # An exact multiple of the limit: the last full page says there is nothing more.
    exact = get(api, "/v1/audit/events", auditor(demo), limit=len(events)).json()
    assert exact["next_cursor"] is None
    assert len(exact["events"]) == len(events)


@both_backends
def test_a_cursor_continues_the_same_filter(runtime, demo, api, varied_log):
    page = get(api, "/v1/audit/events", auditor(demo), type="tool.called", limit=1).json()
    following = get(
        api, "/v1/audit/events", auditor(demo), type="tool.called", cursor=page["next_cursor"]
    ).json()

    expected = [e.seq for e in db_events(runtime) if e.type == "tool.called"]
    assert [e["seq"] for e in page["events"] + following["events"]] == expected


GARBAGE_CURSORS = {
    "not-base64": "!!!",
    "base64-of-garbage": "garbage",
    "a-list": base64.urlsafe_b64encode(b"[1, 2]").decode(),
    "no-after": base64.urlsafe_b64encode(b"{}").decode(),
    "not-utf8": base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    "negative": cursor_of(-1),
    "string": cursor_of("5"),
    "bool": cursor_of(True),
    "float": cursor_of(1.5),
    "too-long": "x" * 201,
}


def test_a_garbage_cursor_is_400(runtime, demo, api):
    for name, cursor in GARBAGE_CURSORS.items():
        before = db_events(runtime)[-1].seq

        response = get(api, "/v1/audit/events", auditor(demo), cursor=cursor)

        assert response.status_code == 400, (name, response.text)
        body = assert_problem(response, 400, "INVALID_ARGUMENT")
        assert "cursor" in body["detail"]
        assert_one_refusal_each(runtime, before, "INVALID_ARGUMENT", count=1)


@both_backends
def test_a_cursor_beyond_any_seq_is_not_a_server_error(demo, api):
    """BUG: the decoded seq is bound unchecked: SQLite raises OverflowError, PostgreSQL
    "bigint out of range", and the API answers 500 to a client mistake."""
    for after in (2**63, 10**20):
        response = get(api, "/v1/audit/events", auditor(demo), cursor=cursor_of(after))

        assert response.status_code < 500, (after, response.text)
        if response.status_code == 200:
            assert response.json() == {"events": [], "next_cursor": None}
        else:
            assert_problem(response, 400, "INVALID_ARGUMENT")


@both_backends
def test_paging_while_events_are_appended_neither_skips_nor_repeats(runtime, demo, api, door):
    stop, writing = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def keep_recording() -> None:
        try:
            while not stop.is_set():
                with session_scope(runtime.engine) as session:
                    for _ in range(2):  # units of work of two events
                        audit.record(
                            session, tenant=TENANT, actor="test:writer", type="test.append"
                        )
                writing.set()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def keep_calling_tools() -> None:
        try:
            while not stop.is_set():
                door.call("get_order", {"order_id": demo["orders"]["paid"]}, new_trace_id(), None)
                stop.wait(0.005)
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=keep_recording), threading.Thread(target=keep_calling_tools)]
    for writer in writers:
        writer.start()
    seen: list[int] = []
    typed: list[int] = []
    try:
        while not writing.is_set() and not errors:
            writing.wait(0.1)
        head_when_paging_began = db_events(runtime)[-1].seq
        cursors: dict[str, str | None] = {"all": None, "typed": None}
        finished: set[str] = set()
        pages = 0
        while finished != {"all", "typed"}:
            if pages == 25:
                stop.set()  # the writers kept appending during the first 25 rounds of pages
            # Pages of 3 while the writers append; once they stop, the rest of what they
            # wrote (thousands of events on SQLite) is read on, from the same cursors, in
            # pages of 500.
            limit = 3 if pages < 25 else 500
            for name, filters, sink in (
                ("all", {}, seen),
                ("typed", {"type": "test.append"}, typed),
            ):
                if name in finished:
                    continue
                response = get(
                    api,
                    "/v1/audit/events",
                    auditor(demo),
                    limit=limit,
                    cursor=cursors[name],
                    **filters,
                )
                assert response.status_code == 200, response.text
                page = response.json()
                if "type" in filters:
                    assert {e["type"] for e in page["events"]} <= {filters["type"]}
                sink += [e["seq"] for e in page["events"]]
                cursors[name] = page["next_cursor"]
                if page["next_cursor"] is None:
                    finished.add(name)
            pages += 1
    finally:
        stop.set()
        for writer in writers:
            writer.join(timeout=120)
    assert errors == []

    database = db_events(runtime)
    assert seen == sorted(set(seen)), "strictly increasing, no duplicates"
    assert seen == [e.seq for e in database if e.seq <= seen[-1]], "no gaps"
    assert typed == sorted(set(typed))
    assert typed == [e.seq for e in database if e.type == "test.append" and e.seq <= typed[-1]]
    assert seen[-1] > head_when_paging_began, "events appended while paging were reached"
    assert {e.type for e in database if e.seq > head_when_paging_began} >= {
        "test.append",
        "tool.called",
    }


# --- export ---------------------------------------------------------------------------------


@both_backends
def test_the_export_is_ndjson_of_exactly_the_hashed_fields_and_equals_the_database(
    runtime, demo, api, varied_log
):
    response = get(api, "/v1/audit/export", auditor(demo))

    assert response.status_code == 200, response.text
    assert response.headers["content-type"].split(";")[0] == "application/x-ndjson"
    raw_lines = response.text.split("\n")
    assert raw_lines[-1] == "", "every line ends with a newline"
    lines = [json.loads(line) for line in raw_lines[:-1]]
    previous = GENESIS
    for line in lines:
        assert isinstance(line, dict)
        assert set(line) == EXPORT_KEYS
        assert line["prev_hash"] == previous
        assert line["hash"] == documented_hash(line)
        previous = line["hash"]
    # Everything in the database up to the export's own audit event, which comes next.
    *before, own = db_events(runtime)
    assert lines == [as_exported(e) for e in before]
    assert (own.type, own.seq, own.data["through_seq"]) == (
        "audit.exported",
        len(lines) + 1,
        len(lines),
    )


@both_backends
def test_an_export_stops_at_the_head_before_its_own_event(runtime, demo, api, varied_log):
    """Before: the stream read its snapshot after the ``audit.exported`` event committed, so
    every export ended with an event no checkpoint taken before it could cover."""
    first = export_lines(api, demo)
    second = export_lines(api, demo)
    typed = export_lines(api, demo, type="audit.exported")

    events = db_events(runtime)
    exports = [e for e in events if e.type == "audit.exported"]
    assert [e.data["through_seq"] for e in exports] == [
        first[-1]["seq"],
        second[-1]["seq"],
        exports[1].seq,
    ]
    assert first == [as_exported(e) for e in events if e.seq < exports[0].seq]
    # The second export holds the first one's event, and stops right before its own.
    assert second == [as_exported(e) for e in events if e.seq < exports[1].seq]
    assert second[-1]["type"] == "audit.exported"
    assert typed == [as_exported(e) for e in exports[:2]]


@both_backends
def test_the_export_takes_the_same_filters_as_the_query(runtime, demo, api, varied_log):
    moments = sorted({e.at for e in db_events(runtime)})
    for chosen in (
        {"type": "tool.called"},
        {"actor": "system:worker"},
        {"draft_id": varied_log["draft_id"]},
        {"execution_id": "exe_test1"},
        {"trace_id": varied_log["trace_b"]},
        {
            "since": spelled(moments[1], timezone(timedelta(hours=2))),
            "until": spelled(moments[-1], UTC),
        },
    ):
        listed = all_pages(api, demo, limit=2, **chosen)
        exported = export_lines(api, demo, **chosen)

        assert listed, f"the filter matches something: {chosen}"
        # The query ran before the export was audited; the export stops before its own
        # event but sees those of the exports before it when they match the filter too.
        assert [e for e in exported if e["type"] != "audit.exported"] == listed, chosen


@both_backends
def test_each_export_is_audited_with_who_and_which_filters(runtime, demo, api, varied_log):
    since = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=-5)))

    export_lines(api, demo)
    export_lines(api, demo, type="tool.called", trace_id=varied_log["trace_a"], since=since)

    exported = [e for e in db_events(runtime) if e.type == "audit.exported"]
    assert len(exported) == 2
    assert all(e.actor == "auditor:audrey" for e in exported)
    assert exported[0].data == {"filters": {}, "through_seq": exported[0].seq - 1}
    assert exported[1].data["through_seq"] == exported[1].seq - 1
    filters = exported[1].data["filters"]
    assert set(filters) == {"type", "trace_id", "since"}
    assert (filters["type"], filters["trace_id"]) == ("tool.called", varied_log["trace_a"])
    assert datetime.fromisoformat(filters["since"]) == since


@both_backends
def test_an_export_streamed_while_events_are_appended_is_a_linked_prefix_of_the_chain(
    runtime, demo
):
    """Streamed by a real uvicorn server over a socket, while another thread appends."""
    with session_scope(runtime.engine) as session:
        for index in range(3_000):  # several of the service's fetch batches
            audit.record(
                session, tenant=TENANT, actor="test:bulk", type="test.bulk", data={"i": index}
            )
    stop = threading.Event()

    def keep_recording() -> None:
        while not stop.is_set():
            record(runtime, actor="test:writer", type="test.append")

    writer = threading.Thread(target=keep_recording)
    writer.start()
    try:
        with (
            served(create_app(runtime)) as api,
            api.stream("GET", "/v1/audit/export", headers=auditor(demo)) as r,
        ):
            assert r.status_code == 200
            lines = [json.loads(line) for line in r.iter_lines() if line]
    finally:
        stop.set()
        writer.join(timeout=60)

    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    previous = GENESIS
    for line in lines:
        assert line["prev_hash"] == previous
        previous = line["hash"]
    assert len(lines) > 3_000
