"""The tamper-evident audit log: one hash chain per tenant (DESIGN.md §8).

Hashes are recomputed here from the documented construction, independently of
``service.audit.chain.event_hash``:

    body = {"seq", "at", "tenant", "actor", "type", "draft_id",
            "execution_id", "trace_id", "data", "prev_hash"}
    hash = hex(SHA-256(b"draftgate.audit.v1\\n" || JCS(body)))
"""

from __future__ import annotations

import gc
import hashlib
import threading
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import rfc8785
from sqlalchemy import Engine, delete, update
from sqlmodel import Session, col, select

from mcp_adapter.tools import ToolDoor
from service.audit import actions as audit
from service.audit.models import AuditEvent, AuditHead
from service.config import Settings
from service.db import run_unit, session_scope
from service.errors import DomainError, invalid_argument
from service.runtime import Runtime, build_runtime
from service.tracing import new_trace_id
from tests.support.backends import both_backends, sqlite_only

pytestmark = both_backends

GENESIS = "0" * 64
EVENTS = AuditEvent.__table__  # type: ignore[attr-defined]
HEADS = AuditHead.__table__  # type: ignore[attr-defined]

# Tests run on both backends (``pytestmark``), except the tamper matrix marked with
# this: which row or field was changed, and how the verifier reports it, is decided in Python
# over the rows read back. What the database decides stays on both: storing and reading the
# chain back (construction, a clean log), a JSON value edited in place, the unique (tenant,
# seq) constraint a swap works around, the server-side cursor of a verification that stops
# early, and concurrent writers.
on_sqlite = sqlite_only


# --- an independent re-implementation of the documented construction -------------------


def _rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def expected_hash(event: AuditEvent) -> str:
    body = {
        "seq": event.seq,
        "at": _rfc3339(event.at),
        "tenant": event.tenant,
        "actor": event.actor,
        "type": event.type,
        "draft_id": event.draft_id,
        "execution_id": event.execution_id,
        "trace_id": event.trace_id,
        "data": event.data,
        "prev_hash": event.prev_hash,
    }
    return hashlib.sha256(b"draftgate.audit.v1\n" + rfc8785.dumps(body)).hexdigest()


# --- helpers ---------------------------------------------------------------------------


def chain_of(engine: Engine, tenant: str) -> list[AuditEvent]:
    with Session(engine) as session:
        statement = (
            select(AuditEvent).where(col(AuditEvent.tenant) == tenant).order_by(col(AuditEvent.seq))
        )
        return list(session.exec(statement).all())


def head_of(engine: Engine, tenant: str) -> AuditHead | None:
    with Session(engine) as session:
        return session.get(AuditHead, tenant)


def assert_chain_is_sound(engine: Engine, tenant: str) -> list[AuditEvent]:
    """Seqs 1..n without gaps, each prev_hash the previous hash, each hash recomputable."""
    events = chain_of(engine, tenant)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    previous = GENESIS
    for event in events:
        assert event.prev_hash == previous, f"seq {event.seq} does not link to its predecessor"
        assert event.hash == expected_hash(event), f"seq {event.seq} hash is not reproducible"
        previous = event.hash
    head = head_of(engine, tenant)
    if events:
        assert head is not None
        assert (head.seq, head.hash) == (events[-1].seq, events[-1].hash)
    return events


def record_events(engine: Engine, tenant: str, count: int, *, per_unit: int = 1) -> None:
    for start in range(0, count, per_unit):
        with session_scope(engine) as session:
            for index in range(start, min(start + per_unit, count)):
                audit.record(
                    session,
                    tenant=tenant,
                    actor="test:chain",
                    type="test.event",
                    data={"index": index},
                )


def verify(engine: Engine, tenant: str) -> Any:
    with session_scope(engine) as session:
        return audit.verify(session, tenant)


def tamper(engine: Engine, statement: Any) -> None:
    """Change the stored log behind the application's back, and commit."""
    with engine.begin() as connection:
        result = connection.execute(statement)
        assert result.rowcount >= 1, "the tampering statement touched no row"


def event_row(tenant: str, seq: int) -> Any:
    return (EVENTS.c.tenant == tenant) & (EVENTS.c.seq == seq)


def assert_tampered_at(engine: Engine, tenant: str, seq: int) -> Any:
    result = verify(engine, tenant)
    assert result.ok is False
    assert result.first_bad_seq == seq, result.problem
    assert result.events_checked == seq - 1
    assert result.problem
    return result


@pytest.fixture
def door(runtime: Runtime, demo: dict[str, Any]) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def ten_events(runtime: Runtime) -> Engine:
    """A tenant "acme" with 10 events, recorded in units of work of one to three events."""
    record_events(runtime.engine, "acme", 4, per_unit=1)
    record_events(runtime.engine, "acme", 6, per_unit=3)
    assert len(assert_chain_is_sound(runtime.engine, "acme")) == 10
    return runtime.engine


# --- construction --------------------------------------------------------------------


def test_first_event_of_a_tenant_starts_at_seq_1_and_links_to_the_genesis_hash(runtime):
    record_events(runtime.engine, "fresh", 1)

    [event] = chain_of(runtime.engine, "fresh")

    assert event.seq == 1
    assert event.prev_hash == GENESIS
    assert event.hash == expected_hash(event)
    assert len(event.hash) == 64


def test_the_hash_covers_every_documented_field(runtime):
    at_before = datetime.now(UTC)
    with session_scope(runtime.engine) as session:
        audit.record(
            session,
            tenant="acme",
            actor="approver:alice",
            type="draft.approved",
            draft_id="dft_" + "a" * 32,
            execution_id="exe_123",
            trace_id="0af7651916cd43dd8448eb211c80319c",
            data={"amount_minor": 2**53 - 1, "note": "Café ☕ naïve", "nested": {"b": [1, 2]}},
        )

    [event] = chain_of(runtime.engine, "acme")

    assert event.at.tzinfo is not None
    assert at_before - timedelta(seconds=1) <= event.at <= datetime.now(UTC)
    assert (event.draft_id, event.execution_id, event.trace_id) == (
        "dft_" + "a" * 32,
        "exe_123",
        "0af7651916cd43dd8448eb211c80319c",
    )
    assert event.data == {
        "amount_minor": 2**53 - 1,
        "note": "Café ☕ naïve",
        "nested": {"b": [1, 2]},
    }
    assert event.hash == expected_hash(event)


def test_tool_calls_extend_the_chain_with_consecutive_seqs_and_linked_hashes(runtime, demo, door):
    seeded = assert_chain_is_sound(runtime.engine, "demo")
    assert seeded, "seeding the demo is audited (tokens, keys)"
    trace_id = new_trace_id()

    door.call("get_order", {"order_id": demo["orders"]["paid"]}, trace_id, None)
    draft = door.call(
        "propose_refund",
        {
            "order_id": demo["orders"]["delivered"],
            "amount": {"amount_minor": 2500, "currency": "USD"},
            "reason": "damaged",
        },
        trace_id,
        None,
    )
    with pytest.raises(DomainError):
        door.call("get_order", {"order_id": "not-an-order"}, trace_id, None)

    events = assert_chain_is_sound(runtime.engine, "demo")
    new = events[len(seeded) :]
    assert [(e.type, e.draft_id) for e in new] == [
        ("tool.called", None),
        ("draft.proposed", draft["draft_id"]),
        ("tool.called", draft["draft_id"]),
        ("tool.refused", None),
    ]
    assert {e.trace_id for e in new} == {trace_id}
    assert new[0].prev_hash == seeded[-1].hash
    assert verify(runtime.engine, "demo").ok


def test_separate_tenants_have_separate_chains(runtime):
    for _ in range(3):
        record_events(runtime.engine, "tenant-a", 2)
        record_events(runtime.engine, "tenant-b", 1)
    with session_scope(runtime.engine) as session:  # one unit of work touching both chains
        for tenant in ("tenant-b", "tenant-a", "tenant-b"):
            audit.record(session, tenant=tenant, actor="test:chain", type="test.event")

    chain_a = assert_chain_is_sound(runtime.engine, "tenant-a")
    chain_b = assert_chain_is_sound(runtime.engine, "tenant-b")

    assert [e.seq for e in chain_a] == list(range(1, 8))
    assert [e.seq for e in chain_b] == list(range(1, 6))
    assert chain_a[0].prev_hash == chain_b[0].prev_hash == GENESIS
    assert {e.hash for e in chain_a}.isdisjoint({e.hash for e in chain_b})

    tamper(runtime.engine, update(EVENTS).where(event_row("tenant-a", 3)).values(actor="mallory"))
    assert verify(runtime.engine, "tenant-a").first_bad_seq == 3
    untouched = verify(runtime.engine, "tenant-b")
    assert untouched.ok
    assert untouched.events_checked == 5


def test_events_of_a_unit_of_work_that_rolls_back_are_not_written(runtime):
    record_events(runtime.engine, "acme", 2)

    def failing_unit_of_work() -> None:
        with session_scope(runtime.engine) as session:
            audit.record(session, tenant="acme", actor="test:chain", type="test.lost")
            audit.record(session, tenant="other", actor="test:chain", type="test.lost")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        failing_unit_of_work()

    assert [e.type for e in chain_of(runtime.engine, "acme")] == ["test.event"] * 2
    assert chain_of(runtime.engine, "other") == []
    assert head_of(runtime.engine, "acme").seq == 2

    record_events(runtime.engine, "acme", 1)  # the next event follows without a gap
    assert [e.seq for e in assert_chain_is_sound(runtime.engine, "acme")] == [1, 2, 3]


def test_a_refused_unit_of_work_leaves_only_its_refusal_event(runtime):
    def work(session: Session) -> None:
        audit.record(session, tenant="acme", actor="test:chain", type="test.would_have_happened")
        raise invalid_argument("refused on purpose")

    def on_refusal(session: Session, error: DomainError) -> None:
        audit.record(
            session, tenant="acme", actor="test:chain", type="test.refused", data={"e": error.code}
        )

    with pytest.raises(DomainError):
        run_unit(runtime.engine, work, on_refusal=on_refusal)

    events = assert_chain_is_sound(runtime.engine, "acme")
    assert [(e.seq, e.type, e.data) for e in events] == [
        (1, "test.refused", {"e": "INVALID_ARGUMENT"})
    ]


# --- verification ---------------------------------------------------------------------


def test_verify_passes_on_a_clean_log(runtime, demo, door):
    for _ in range(3):
        door.call("list_orders", {}, new_trace_id(), None)

    events = assert_chain_is_sound(runtime.engine, "demo")
    result = verify(runtime.engine, "demo")

    assert result.ok is True
    assert result.first_bad_seq is None
    assert result.events_checked == len(events)
    assert (result.head_seq, result.head_hash) == (events[-1].seq, events[-1].hash)


def test_verify_of_a_tenant_without_events_is_ok_and_empty(runtime):
    result = verify(runtime.engine, "nobody")

    assert (result.ok, result.events_checked, result.head_seq, result.head_hash) == (
        True,
        0,
        0,
        GENESIS,
    )
    assert result.first_bad_seq is None


@on_sqlite
@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"data": {"index": 999}}, id="data"),
        pytest.param({"actor": "approver:mallory"}, id="actor"),
        pytest.param({"type": "test.harmless"}, id="type"),
        pytest.param({"at": datetime(2020, 1, 1, tzinfo=UTC)}, id="at"),
        pytest.param({"draft_id": "dft_" + "0" * 32}, id="draft_id"),
        pytest.param({"trace_id": "f" * 32}, id="trace_id"),
    ],
)
def test_editing_an_event_is_detected_at_that_seq(ten_events, changes):
    tamper(ten_events, update(EVENTS).where(event_row("acme", 4)).values(**changes))

    result = assert_tampered_at(ten_events, "acme", 4)
    assert result.head_seq == 3


def test_editing_only_the_json_data_in_place_is_detected(ten_events):
    [event] = [e for e in chain_of(ten_events, "acme") if e.seq == 7]
    tamper(
        ten_events,
        update(EVENTS).where(event_row("acme", 7)).values(data={**event.data, "extra": True}),
    )

    assert_tampered_at(ten_events, "acme", 7)


@on_sqlite
def test_editing_an_event_and_recomputing_its_hash_is_detected_at_the_next_seq(ten_events):
    [event] = [e for e in chain_of(ten_events, "acme") if e.seq == 5]
    event.data = {"index": -1}
    forged = expected_hash(event)  # a consistent event on its own, but no longer chained
    tamper(
        ten_events,
        update(EVENTS).where(event_row("acme", 5)).values(data=event.data, hash=forged),
    )

    result = assert_tampered_at(ten_events, "acme", 6)
    assert "prev_hash" in result.problem


@on_sqlite
def test_deleting_an_event_is_detected_at_the_missing_seq(ten_events):
    tamper(ten_events, delete(EVENTS).where(event_row("acme", 6)))

    result = assert_tampered_at(ten_events, "acme", 6)
    assert "missing" in result.problem


@on_sqlite
def test_deleting_the_first_event_is_detected_at_seq_1(ten_events):
    tamper(ten_events, delete(EVENTS).where(event_row("acme", 1)))

    assert_tampered_at(ten_events, "acme", 1)


def test_swapping_two_events_is_detected_at_the_first_of_them(ten_events):
    rows = {e.seq: e.id for e in chain_of(ten_events, "acme")}
    with ten_events.begin() as connection:  # (tenant, seq) is unique: swap through a free seq
        connection.execute(update(EVENTS).where(EVENTS.c.id == rows[3]).values(seq=-1))
        connection.execute(update(EVENTS).where(EVENTS.c.id == rows[8]).values(seq=3))
        connection.execute(update(EVENTS).where(EVENTS.c.id == rows[3]).values(seq=8))

    assert_tampered_at(ten_events, "acme", 3)


@on_sqlite
def test_swapping_the_contents_of_adjacent_events_is_detected(ten_events):
    events = {e.seq: e for e in chain_of(ten_events, "acme")}
    fields = ("at", "actor", "type", "data", "prev_hash", "hash")
    with ten_events.begin() as connection:
        for seq, other in ((4, 5), (5, 4)):
            values = {name: getattr(events[other], name) for name in fields}
            connection.execute(update(EVENTS).where(EVENTS.c.id == events[seq].id).values(values))

    assert_tampered_at(ten_events, "acme", 4)


@on_sqlite
def test_truncating_the_tail_is_detected_against_the_head_row(ten_events):
    tamper(ten_events, delete(EVENTS).where((EVENTS.c.tenant == "acme") & (EVENTS.c.seq > 8)))

    result = verify(ten_events, "acme")

    assert result.ok is False
    assert result.events_checked == 8
    assert result.head_seq == 8
    assert result.first_bad_seq == 9
    assert "head" in result.problem


@on_sqlite
def test_deleting_the_last_event_only_is_detected(ten_events):
    tamper(ten_events, delete(EVENTS).where(event_row("acme", 10)))

    result = verify(ten_events, "acme")

    assert result.ok is False
    assert result.first_bad_seq == 10


@on_sqlite
@pytest.mark.parametrize("seq", [1, 5, 10])
def test_editing_an_events_hash_is_detected_at_that_seq(ten_events, seq):
    forged = hashlib.sha256(b"forged").hexdigest()
    tamper(ten_events, update(EVENTS).where(event_row("acme", seq)).values(hash=forged))

    assert_tampered_at(ten_events, "acme", seq)


@on_sqlite
def test_editing_an_events_prev_hash_is_detected_at_that_seq(ten_events):
    tamper(ten_events, update(EVENTS).where(event_row("acme", 2)).values(prev_hash=GENESIS))

    assert_tampered_at(ten_events, "acme", 2)


@on_sqlite
def test_editing_the_head_row_is_detected(ten_events):
    tamper(
        ten_events,
        update(HEADS).where(HEADS.c.tenant == "acme").values(hash=hashlib.sha256(b"x").hexdigest()),
    )

    result = verify(ten_events, "acme")

    assert result.ok is False
    assert result.events_checked == 10


def test_verifying_a_tampered_log_closes_its_database_cursor(ten_events):
    tamper(ten_events, delete(EVENTS).where(event_row("acme", 2)))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = verify(ten_events, "acme")
        gc.collect()

    assert result.first_bad_seq == 2
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == [], "verify() left a database cursor open"


# --- concurrency -----------------------------------------------------------------------


def _commit_concurrently(engine: Engine, tenant: str, writers: int) -> list[BaseException]:
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            with session_scope(engine) as session:
                audit.record(
                    session, tenant=tenant, actor=f"test:writer-{index}", type="test.concurrent"
                )
                # Every writer reaches its commit at the same moment (no connection is held yet).
                barrier.wait(timeout=60)
        except BaseException as exc:  # collected and asserted in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return errors


@pytest.fixture
def standalone_runtime(tmp_path):
    """Build a runtime for a URL outside the per-backend ``runtime`` fixture."""
    built: list[Runtime] = []

    def build(url: str) -> Runtime:
        built.append(build_runtime(Settings(state_dir=tmp_path / "state", database_url=url)))
        return built[-1]

    yield build
    for runtime in built:
        runtime.engine.dispose()


def test_concurrent_writers_on_postgresql_get_seqs_without_gaps_or_duplicates(
    postgres_url, standalone_runtime
):
    engine = standalone_runtime(postgres_url).engine
    record_events(engine, "busy", 1)  # this tenant's head row exists ...
    errors = _commit_concurrently(engine, "busy", 30)
    errors += _commit_concurrently(engine, "brand-new", 30)  # ... this one's does not yet

    assert errors == []
    for tenant, count in (("busy", 31), ("brand-new", 30)):
        events = assert_chain_is_sound(engine, tenant)
        assert [e.seq for e in events] == list(range(1, count + 1))
        writers = {e.actor for e in events if e.type == "test.concurrent"}
        assert writers == {f"test:writer-{i}" for i in range(30)}
        result = verify(engine, tenant)
        assert result.ok
        assert result.events_checked == count


def test_concurrent_writers_on_sqlite_get_seqs_without_gaps_or_duplicates(
    sqlite_url, standalone_runtime
):
    engine = standalone_runtime(sqlite_url).engine
    errors = _commit_concurrently(engine, "busy", 30)

    assert errors == []
    events = assert_chain_is_sound(engine, "busy")
    assert [e.seq for e in events] == list(range(1, 31))
    assert verify(engine, "busy").ok
