"""Proposing, replaying, revising and reading drafts (DESIGN.md §3), through the core's tool door.

Every call runs as a real tool call: its own transactions, its own audit records, a real
database. The module keeps one runtime per backend (tests/support/mcp_helpers.py); each test
starts on its database emptied and the demo seeded again. Rendering, policy and refusal logic
run on SQLite; what rests on the database (claims and unique constraints, rolled-back units,
timestamps and expiry as stored, rows read back) runs on PostgreSQL too (``@both_backends``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, update
from sqlmodel import col, select

from mcp_adapter.tools import ToolDoor
from service.audit import actions as audit_actions
from service.audit import repository as audit_repository
from service.audit.models import AuditEvent
from service.db import session_scope
from service.drafts.models import Draft, DraftRevision, IdempotencyKey
from service.errors import Category, DomainError
from service.principal import Role
from service.shop.seed import DEMO_ORDERS
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.backends import both_backends
from tests.support.mcp_helpers import module_host_fixtures

mcp_hosts, module_host, demo, runtime, mcp_url = module_host_fixtures()

DAY = timedelta(seconds=86_400)
ORDER_NUMBERS = {seed.key: seed.number for seed in DEMO_ORDERS}
TABLES = {
    "drafts": Draft,
    "draft_revisions": DraftRevision,
    "idempotency_keys": IdempotencyKey,
    "audit_events": AuditEvent,
}


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    """The demo agent (support-agent acting for cust-ada)."""
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


@pytest.fixture
def other_door(runtime, demo) -> ToolDoor:
    """The same agent acting for another customer (cust-grace)."""
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent_other_customer"])


def call(door: ToolDoor, name: str, arguments: dict[str, Any], trace_id: str | None = None):
    return door.call(name, arguments, trace_id or new_trace_id(), None)


def refusal(door: ToolDoor, name: str, arguments: dict[str, Any]) -> DomainError:
    with pytest.raises(DomainError) as caught:
        call(door, name, arguments)
    return caught.value


def attempt(door: ToolDoor, name: str, arguments: dict[str, Any]) -> Any:
    """The call's result, or the DomainError it raised."""
    try:
        return call(door, name, arguments)
    except DomainError as error:
        return error


def refund(order_id: str = "ORD-1004", amount_minor: int = 2_500, **extra: Any):
    arguments: dict[str, Any] = {
        "order_id": order_id,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    return {**arguments, **extra}


def counts(runtime) -> dict[str, int]:
    with session_scope(runtime.engine) as session:
        return {
            name: session.exec(select(func.count()).select_from(model)).one()
            for name, model in TABLES.items()
        }


def draft_row(runtime, draft_id: str) -> Draft:
    with session_scope(runtime.engine) as session:
        draft = session.get(Draft, draft_id)
        assert draft is not None
        return draft


def revision_rows(runtime, draft_id: str) -> list[DraftRevision]:
    with session_scope(runtime.engine) as session:
        statement = (
            select(DraftRevision)
            .where(col(DraftRevision.draft_id) == draft_id)
            .order_by(col(DraftRevision.revision))
        )
        return list(session.exec(statement).all())


def key_rows(runtime) -> list[IdempotencyKey]:
    with session_scope(runtime.engine) as session:
        return list(session.exec(select(IdempotencyKey)).all())


def events(runtime, *, type_: str, draft_id: str | None = None) -> list[AuditEvent]:
    with session_scope(runtime.engine) as session:
        return audit_repository.events_for(session, "demo", draft_id=draft_id, type_=type_)


def expire_draft(runtime, draft_id: str) -> None:
    """Move the draft's expiry into the past, committed, as if its TTL had run out."""
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(col(Draft.id) == draft_id)
            .values(expires_at=utcnow() - timedelta(minutes=1))
        )


def set_status(runtime, draft_id: str, status: str) -> None:
    with session_scope(runtime.engine) as session:
        session.execute(update(Draft).where(col(Draft.id) == draft_id).values(status=status))


def approve_as(runtime, demo, draft_id: str, approver: str = "alice") -> None:
    """Sign the draft's current revision with the approver's demo key and submit it."""
    from pathlib import Path

    from service.approvals import actions as approvals
    from service.approvals.schemas import ApprovalRequest, Decision, build_statement, signed_request
    from service.signing import load_private_key
    from service.sql import rfc3339_seconds

    key = load_private_key(Path(demo["approvers"][approver]["private_key_file"]))
    draft = draft_row(runtime, draft_id)
    statement = build_statement(
        tenant=draft.tenant,
        draft_id=draft.id,
        revision=draft.revision,
        action=draft.action,
        contract_version=draft.contract_version,
        params_sha256=draft.params_sha256,
        decision=Decision.APPROVE,
        approver=approver,
        key_id=demo["approvers"][approver]["key_id"],
        issued_at=rfc3339_seconds(utcnow()),
        source_revision=draft.source_revision,
    )
    body = signed_request(statement, key)
    request = ApprovalRequest.model_validate_json(json.dumps(body))  # as the API parses it
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"][f"approver_{approver}"])
        approvals.submit(
            session,
            principal,
            draft_id=draft_id,
            request=request,
            runtime=runtime,
            now=utcnow(),
        )


def issue_agent_token(runtime, subject: str, on_behalf_of: str) -> str:
    with session_scope(runtime.engine) as session:
        return tokens.issue(
            session,
            tenant="demo",
            subject=subject,
            role=Role.AGENT,
            on_behalf_of=on_behalf_of,
            actor="operator:test",
        ).token


def assert_chain_ok(runtime) -> None:
    with session_scope(runtime.engine) as session:
        result = audit_actions.verify(session, "demo")
    assert result.ok, result.problem


# --- creating a draft ---------------------------------------------------------------------


@both_backends
def test_proposal_creates_revision_one_with_the_business_params(runtime, door):
    trace_id = new_trace_id()
    view = call(door, "propose_refund", refund(idempotency_key="ticket-4711"), trace_id)

    assert view["status"] == "proposed"
    assert view["revision"] == 1
    assert view["action"] == "refund"
    assert view["replayed"] is False
    assert view["draft_id"].startswith("dft_")

    draft = draft_row(runtime, view["draft_id"])
    expected_params = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
    }
    # Control arguments are not business params: they are not shown, hashed or signed.
    assert draft.params == expected_params
    assert draft.revision == 1
    assert draft.tenant == "demo"
    assert draft.contract_version == 1
    assert draft.proposed_by == "support-agent"
    assert draft.on_behalf_of == "cust-ada"
    assert draft.idempotency_key == "ticket-4711"
    assert draft.trace_id == trace_id
    assert draft.amount_minor == 2_500
    assert draft.currency == "USD"

    (revision,) = revision_rows(runtime, view["draft_id"])
    assert revision.revision == 1
    assert revision.params == expected_params
    assert revision.params_sha256 == draft.params_sha256
    assert revision.trace_id == trace_id


def test_params_sha256_is_sha256_of_the_jcs_of_the_params(runtime, door):
    view = call(door, "propose_refund", refund(note="Kratzer am Gehäuse", idempotency_key="k"))
    jcs = (
        '{"amount":{"amount_minor":2500,"currency":"USD"},"note":"Kratzer am Gehäuse",'
        '"order_id":"ORD-1004","reason":"damaged"}'
    ).encode()
    expected = hashlib.sha256(jcs).hexdigest()
    assert view["params_sha256"] == expected
    assert draft_row(runtime, view["draft_id"]).params_sha256 == expected
    assert revision_rows(runtime, view["draft_id"])[0].params_sha256 == expected


def test_summary_and_policy_of_a_large_usd_refund(runtime, door):
    # The delivered order totals 785.00 USD: a full refund is above 500.00 USD.
    view = call(door, "propose_refund", refund(amount_minor=78_500))
    assert view["summary"] == "Refund 785.00 USD on order ORD-1004 (reason: damaged)."
    assert view["amount"] == {"amount_minor": 78_500, "currency": "USD", "display": "785.00 USD"}
    assert view["approvals"] == {"required": 2, "received": 0}
    assert view["risk"] == "high"
    assert "0 of 2 approvals" in view["message"]
    draft = draft_row(runtime, view["draft_id"])
    assert draft.approvals_required == 2
    assert draft.policy["approvals_required"] == 2
    assert draft.policy["name"] == "refund"
    assert draft.policy["rule"] == "above every lower tier: 2 distinct approvers"


def test_a_refund_of_exactly_500_usd_needs_one_approver(runtime, door):
    view = call(door, "propose_refund", refund(amount_minor=50_000))
    assert view["approvals"]["required"] == 1
    assert draft_row(runtime, view["draft_id"]).policy["rule"] == "up to 500.00 USD: 1 approver"
    above = call(door, "propose_refund", refund(amount_minor=50_001))
    assert above["approvals"]["required"] == 2


@pytest.mark.parametrize(
    ("order_key", "amount", "summary_amount", "required"),
    [
        ("delivered_jpy", {"amount_minor": 500, "currency": "JPY"}, "500 JPY", 1),
        ("delivered_jpy", {"amount_minor": 8_800, "currency": "JPY"}, "8,800 JPY", 1),
        # KWD has no tiers of its own: the strictest applies, whatever the amount
        ("delivered_kwd", {"amount_minor": 12_500, "currency": "KWD"}, "12.500 KWD", 2),
    ],
)
def test_summary_uses_the_currency_exponent(
    runtime, door, order_key, amount, summary_amount, required
):
    order_id = ORDER_NUMBERS[order_key]
    view = call(
        door, "propose_refund", {"order_id": order_id, "amount": amount, "reason": "wrong_item"}
    )
    assert view["summary"] == f"Refund {summary_amount} on order {order_id} (reason: wrong item)."
    assert view["amount"]["display"] == summary_amount
    assert view["approvals"]["required"] == required


@both_backends
def test_expires_at_is_created_at_plus_the_policy_ttl(runtime, door):
    view = call(door, "propose_refund", refund())
    draft = draft_row(runtime, view["draft_id"])
    assert draft.expires_at - draft.created_at == DAY
    assert draft.created_at.tzinfo is not None
    assert view["expires_at"] == draft.expires_at.isoformat().replace("+00:00", "Z")


@pytest.fixture
def demo_policies_runtime(tmp_path, sqlite_url):
    """A SQLite runtime with non-default policies (cancel_order: TTL 600 s, 3 approvers)."""
    from service.config import Settings
    from service.demo import seed_demo
    from service.runtime import build_runtime

    settings = Settings(
        state_dir=tmp_path / "custom",
        database_url=sqlite_url,
        policies={"cancel_order": {"ttl_seconds": 600, "tiers": [{"approvals": 3}]}},
    )
    runtime = build_runtime(settings)
    with session_scope(runtime.engine) as session:
        manifest = seed_demo(
            session,
            tenant="demo",
            state_dir=settings.state_dir,
            api_url="http://api.invalid",
            mcp_url="http://mcp.invalid/mcp",
        )
    yield runtime, manifest
    runtime.engine.dispose()


def test_draft_ttl_follows_the_configured_policy(demo_policies_runtime):
    runtime, manifest = demo_policies_runtime
    door = ToolDoor(runtime, stdio_token=manifest["tokens"]["agent"])
    view = call(door, "propose_cancel_order", {"order_id": "ORD-1002", "reason": "out_of_stock"})
    draft = draft_row(runtime, view["draft_id"])
    assert draft.expires_at - draft.created_at == timedelta(seconds=600)
    assert view["approvals"]["required"] == 3


@both_backends
def test_idempotency_key_is_kept_for_the_retention_period(runtime, door):
    call(door, "propose_refund", refund(idempotency_key="keep-me"))
    (key,) = key_rows(runtime)
    assert (key.tenant, key.action, key.key) == ("demo", "refund", "keep-me")
    assert key.expires_at - key.created_at >= DAY


@both_backends
def test_proposal_is_audited_in_the_same_unit(runtime, door):
    trace_id = new_trace_id()
    view = call(door, "propose_refund", refund(amount_minor=78_500), trace_id)
    (proposed,) = events(runtime, type_="draft.proposed", draft_id=view["draft_id"])
    assert proposed.trace_id == trace_id
    assert proposed.data["params_sha256"] == view["params_sha256"]
    assert proposed.data["revision"] == 1
    assert proposed.data["approvals_required"] == 2
    (called,) = events(runtime, type_="tool.called", draft_id=view["draft_id"])
    assert called.data["tool"] == "propose_refund"
    assert called.data["replayed"] is False
    assert_chain_ok(runtime)


def test_address_change_shows_the_agent_masked_params_but_hashes_the_real_ones(runtime, door):
    address = {
        "recipient": "Ada Lovelace",
        "lines": ["10 Downing Street"],
        "district": "Westminster",
        "city": "London",
        "postal_code": "SW1A 2AA",
        "country": "GB",
        "phone": "+447700900999",
    }
    view = call(
        door, "propose_change_shipping_address", {"order_id": "ORD-1002", "address": address}
    )
    assert view["params"]["address"]["recipient"] == "***"
    assert view["params"]["address"]["phone"] == "+44******0999"
    assert view["params"]["address"]["city"] == "London"
    assert "Downing" not in repr(view)
    assert "Ada" not in view["summary"]
    assert "Westminster, London, GB" in view["summary"]
    draft = draft_row(runtime, view["draft_id"])
    assert draft.params == {"order_id": "ORD-1002", "address": address}
    expected = hashlib.sha256(
        b'{"address":{"city":"London","country":"GB","district":"Westminster",'
        b'"lines":["10 Downing Street"],"phone":"+447700900999","postal_code":"SW1A 2AA",'
        b'"recipient":"Ada Lovelace"},"order_id":"ORD-1002"}'
    ).hexdigest()
    assert draft.params_sha256 == expected
    # Nor does the audit log hold the raw address.
    (called,) = events(runtime, type_="tool.called", draft_id=view["draft_id"])
    assert "Downing" not in repr(called.data)


@both_backends
def test_invalid_arguments_write_nothing_but_the_refusal(runtime, door):
    before = counts(runtime)
    error = refusal(
        door,
        "propose_refund",
        refund(amount={"amount_minor": "2500", "currency": "USD"}, idempotency_key="bad"),
    )
    assert error.code == "INVALID_ARGUMENT"
    after = counts(runtime)
    assert after == {**before, "audit_events": before["audit_events"] + 1}


@both_backends
def test_a_business_refusal_does_not_burn_the_key(runtime, door):
    before = counts(runtime)
    error = refusal(door, "propose_refund", refund(amount_minor=78_501, idempotency_key="k-1"))
    assert error.code == "REFUND_EXCEEDS_REFUNDABLE"
    assert counts(runtime) == {**before, "audit_events": before["audit_events"] + 1}
    (refused,) = events(runtime, type_="tool.refused")
    assert refused.data["error"]["code"] == "REFUND_EXCEEDS_REFUNDABLE"
    # The key claim was rolled back with the rest, so the corrected call may use it.
    view = call(door, "propose_refund", refund(amount_minor=78_500, idempotency_key="k-1"))
    assert view["replayed"] is False


# --- idempotency --------------------------------------------------------------------------


@both_backends
def test_same_key_and_params_return_the_same_draft(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="retry-me"))
    before = counts(runtime)
    second = call(door, "propose_refund", refund(idempotency_key="retry-me"))
    assert second["draft_id"] == first["draft_id"]
    assert second["replayed"] is True
    assert second["revision"] == 1
    assert second["params_sha256"] == first["params_sha256"]
    after = counts(runtime)
    assert {k: after[k] for k in ("drafts", "draft_revisions", "idempotency_keys")} == {
        k: before[k] for k in ("drafts", "draft_revisions", "idempotency_keys")
    }
    (called,) = [
        event
        for event in events(runtime, type_="tool.called", draft_id=first["draft_id"])
        if event.data["replayed"]
    ]
    assert called.data["tool"] == "propose_refund"


def test_replay_does_not_depend_on_the_order_of_keys(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="order"))
    reordered = {
        "reason": "damaged",
        "idempotency_key": "order",
        "amount": {"currency": "USD", "amount_minor": 2_500},
        "order_id": "ORD-1004",
    }
    second = call(door, "propose_refund", reordered)
    assert second["draft_id"] == first["draft_id"]
    assert second["replayed"] is True


@both_backends
@pytest.mark.parametrize(
    "changed",
    [
        {"amount": {"amount_minor": 2_501, "currency": "USD"}},
        {"reason": "goodwill"},
        {"note": "one more word"},
    ],
)
def test_same_key_with_different_params_is_refused_and_writes_nothing(runtime, door, changed):
    first = call(door, "propose_refund", refund(idempotency_key="one-use"))
    before = counts(runtime)
    error = refusal(door, "propose_refund", {**refund(idempotency_key="one-use"), **changed})
    assert error.code == "IDEMPOTENCY_KEY_REUSED"
    assert error.category is Category.CONFLICT
    assert error.retryable is False
    assert error.to_dict()["retryable"] is False
    after = counts(runtime)
    assert after == {**before, "audit_events": before["audit_events"] + 1}
    (refused,) = events(runtime, type_="tool.refused")
    assert refused.data["error"]["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert refused.data["outcome"] == "refused"
    # The original draft is untouched.
    draft = draft_row(runtime, first["draft_id"])
    assert draft.revision == 1
    assert draft.params_sha256 == first["params_sha256"]


@both_backends
def test_keys_are_scoped_per_action(runtime, door):
    refund_view = call(door, "propose_refund", refund(idempotency_key="shared"))
    cancel_view = call(
        door,
        "propose_cancel_order",
        {"order_id": "ORD-1002", "reason": "customer_request", "idempotency_key": "shared"},
    )
    assert cancel_view["replayed"] is False
    assert cancel_view["draft_id"] != refund_view["draft_id"]
    assert cancel_view["action"] == "cancel_order"
    assert sorted((key.action, key.key) for key in key_rows(runtime)) == [
        ("cancel_order", "shared"),
        ("refund", "shared"),
    ]
    # Each claim still guards its own action.
    assert (
        refusal(
            door,
            "propose_cancel_order",
            {"order_id": "ORD-1002", "reason": "out_of_stock", "idempotency_key": "shared"},
        ).code
        == "IDEMPOTENCY_KEY_REUSED"
    )


@both_backends
def test_keys_are_scoped_per_agent(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="agent-scoped"))
    second_agent = ToolDoor(runtime, stdio_token=issue_agent_token(runtime, "bot-2", "cust-ada"))
    # Another agent's identical key is its own claim, even for different params.
    view = call(
        second_agent, "propose_refund", refund(amount_minor=1_000, idempotency_key="agent-scoped")
    )
    assert view["replayed"] is False
    assert view["draft_id"] != first["draft_id"]
    assert len(key_rows(runtime)) == 2


@both_backends
def test_a_key_replay_never_returns_another_customers_draft(runtime, door, other_door):
    """The same agent acting for another end user must not read cust-ada's draft via a key."""
    ada = call(door, "propose_refund", refund(amount_minor=78_500, idempotency_key="k-42"))
    outcome = attempt(
        other_door, "propose_refund", refund(amount_minor=78_500, idempotency_key="k-42")
    )
    assert isinstance(outcome, DomainError), (
        f"cust-grace's agent got draft {outcome['draft_id']} "
        f"(cust-ada's: {outcome['draft_id'] == ada['draft_id']}), summary {outcome['summary']!r}"
    )
    # Her own refund of that order is impossible: the order is unavailable to her.
    assert outcome.category is Category.UNAVAILABLE


@both_backends
def test_one_customers_key_does_not_block_another_customers_proposal(runtime, door, other_door):
    """A key used for cust-ada must neither block nor be revealed to cust-grace's session."""
    call(door, "propose_refund", refund(idempotency_key="ticket-1"))
    grace = call(
        other_door,
        "propose_refund",
        refund(order_id="ORD-2001", amount_minor=999, idempotency_key="ticket-1"),
    )
    assert grace["replayed"] is False
    assert grace["summary"].startswith("Refund 9.99 USD on order ORD-2001")


@both_backends
def test_no_key_and_an_identical_open_proposal_returns_that_draft(runtime, door):
    first = call(door, "propose_refund", refund())
    before = counts(runtime)
    second = call(door, "propose_refund", refund())
    assert second["draft_id"] == first["draft_id"]
    assert second["replayed"] is True
    after = counts(runtime)
    assert (after["drafts"], after["draft_revisions"]) == (
        before["drafts"],
        before["draft_revisions"],
    )
    # Different params are a different proposal.
    third = call(door, "propose_refund", refund(amount_minor=2_600))
    assert third["draft_id"] != first["draft_id"]
    assert third["replayed"] is False


@both_backends
def test_a_new_key_for_an_identical_open_proposal_points_at_that_draft(runtime, door):
    first = call(door, "propose_refund", refund())
    second = call(door, "propose_refund", refund(idempotency_key="late-key"))
    assert second["draft_id"] == first["draft_id"]
    assert second["replayed"] is True
    (key,) = key_rows(runtime)
    assert key.draft_id == first["draft_id"]
    third = call(door, "propose_refund", refund(idempotency_key="late-key"))
    assert third["draft_id"] == first["draft_id"]
    assert counts(runtime)["drafts"] == 1


@both_backends
def test_an_identical_proposal_after_a_draft_expired_creates_a_new_draft(runtime, door):
    first = call(door, "propose_refund", refund())
    expire_draft(runtime, first["draft_id"])
    second = call(door, "propose_refund", refund())
    assert second["draft_id"] != first["draft_id"]
    assert second["replayed"] is False
    assert draft_row(runtime, first["draft_id"]).status == "expired"
    assert draft_row(runtime, first["draft_id"]).open_dedupe_key is None


@both_backends
def test_an_expired_key_can_be_reused_for_new_params(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="old-key"))
    with session_scope(runtime.engine) as session:
        session.execute(
            update(IdempotencyKey)
            .where(col(IdempotencyKey.key) == "old-key")
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    second = call(door, "propose_refund", refund(amount_minor=3_000, idempotency_key="old-key"))
    assert second["replayed"] is False
    assert second["draft_id"] != first["draft_id"]
    (key,) = key_rows(runtime)
    assert key.draft_id == second["draft_id"]
    assert key.expires_at > utcnow()
    # The renewed claim now guards the new params.
    third = call(door, "propose_refund", refund(amount_minor=3_000, idempotency_key="old-key"))
    assert (third["draft_id"], third["replayed"]) == (second["draft_id"], True)


@both_backends
def test_a_key_replay_reports_an_expired_draft_as_expired(runtime, door):
    """Expiry is enforced on every read (docs/decisions/expiry-enforced-on-every-touch.md),
    replays included."""
    first = call(door, "propose_refund", refund(idempotency_key="stale"))
    expire_draft(runtime, first["draft_id"])
    replay = call(door, "propose_refund", refund(idempotency_key="stale"))
    assert replay["draft_id"] == first["draft_id"]
    assert replay["status"] == "expired"


# --- revisions ----------------------------------------------------------------------------


@both_backends
def test_revising_creates_revision_two_with_a_new_digest(runtime, door):
    first = call(door, "propose_refund", refund(amount_minor=2_500))
    revised = call(door, "propose_refund", refund(amount_minor=60_000, draft_id=first["draft_id"]))
    assert revised["draft_id"] == first["draft_id"]
    assert revised["revision"] == 2
    assert revised["replayed"] is False
    assert revised["params_sha256"] != first["params_sha256"]
    assert revised["summary"] == "Refund 600.00 USD on order ORD-1004 (reason: damaged)."
    assert revised["approvals"] == {"required": 2, "received": 0}  # policy re-resolved

    rows = revision_rows(runtime, first["draft_id"])
    assert [row.revision for row in rows] == [1, 2]
    assert [row.params_sha256 for row in rows] == [first["params_sha256"], revised["params_sha256"]]
    assert rows[0].params["amount"]["amount_minor"] == 2_500
    assert rows[1].params["amount"]["amount_minor"] == 60_000
    assert (
        rows[1].params_sha256
        == hashlib.sha256(
            b'{"amount":{"amount_minor":60000,"currency":"USD"},"order_id":"ORD-1004",'
            b'"reason":"damaged"}'
        ).hexdigest()
    )

    draft = draft_row(runtime, first["draft_id"])
    assert draft.revision == 2
    assert draft.params_sha256 == revised["params_sha256"]
    assert draft.approvals_required == 2
    assert "draft_id" not in draft.params
    assert counts(runtime)["drafts"] == 1
    (event,) = events(runtime, type_="draft.revised", draft_id=first["draft_id"])
    assert event.data["revision"] == 2

    status = call(door, "get_draft", {"draft_id": first["draft_id"]})
    assert status["revision"] == 2
    assert status["params_sha256"] == revised["params_sha256"]


@both_backends
def test_a_retried_revision_with_its_own_key_is_replayed(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="create"))
    revise = refund(amount_minor=2_600, draft_id=first["draft_id"], idempotency_key="revise-1")
    revised = call(door, "propose_refund", revise)
    before = counts(runtime)
    again = call(door, "propose_refund", revise)
    assert (again["draft_id"], again["revision"], again["replayed"]) == (
        first["draft_id"],
        2,
        True,
    )
    assert again["params_sha256"] == revised["params_sha256"]
    after = counts(runtime)
    assert {k: after[k] for k in ("drafts", "draft_revisions", "idempotency_keys")} == {
        k: before[k] for k in ("drafts", "draft_revisions", "idempotency_keys")
    }


@both_backends
def test_the_creation_key_cannot_be_reused_for_a_revision(runtime, door):
    first = call(door, "propose_refund", refund(idempotency_key="create"))
    error = refusal(
        door,
        "propose_refund",
        refund(amount_minor=2_600, draft_id=first["draft_id"], idempotency_key="create"),
    )
    assert error.code == "IDEMPOTENCY_KEY_REUSED"
    assert draft_row(runtime, first["draft_id"]).revision == 1


@both_backends
def test_each_revision_gets_its_own_row(runtime, door):
    view = call(door, "propose_refund", refund(amount_minor=1_000))
    for amount in (1_100, 1_200, 1_300):
        view = call(door, "propose_refund", refund(amount_minor=amount, draft_id=view["draft_id"]))
    assert view["revision"] == 4
    rows = revision_rows(runtime, view["draft_id"])
    assert [(row.revision, row.amount_minor) for row in rows] == [
        (1, 1_000),
        (2, 1_100),
        (3, 1_200),
        (4, 1_300),
    ]
    assert len({row.params_sha256 for row in rows}) == 4


@both_backends
def test_revising_restarts_the_ttl(runtime, door):
    first = call(door, "propose_refund", refund())
    before = draft_row(runtime, first["draft_id"])
    call(door, "propose_refund", refund(amount_minor=2_600, draft_id=first["draft_id"]))
    after = draft_row(runtime, first["draft_id"])
    assert after.expires_at > before.expires_at
    assert after.expires_at - after.updated_at == DAY
    assert after.created_at == before.created_at


@both_backends
def test_earlier_approvals_no_longer_count_after_a_revision(runtime, demo, door):
    first = call(door, "propose_refund", refund(amount_minor=78_500))
    approve_as(runtime, demo, first["draft_id"], "alice")
    assert call(door, "get_draft", {"draft_id": first["draft_id"]})["approvals"] == {
        "required": 2,
        "received": 1,
    }
    revised = call(door, "propose_refund", refund(amount_minor=78_000, draft_id=first["draft_id"]))
    assert revised["approvals"] == {"required": 2, "received": 0}
    status = call(door, "get_draft", {"draft_id": first["draft_id"]})
    assert status["approvals"]["received"] == 0
    assert "0 of 2 approvals" in status["message"]
    # Alice may sign the new revision; only that signature counts now.
    approve_as(runtime, demo, first["draft_id"], "alice")
    assert call(door, "get_draft", {"draft_id": first["draft_id"]})["approvals"]["received"] == 1


def test_an_approved_draft_cannot_be_revised(runtime, demo, door):
    first = call(door, "propose_refund", refund(amount_minor=2_500))  # one approver suffices
    approve_as(runtime, demo, first["draft_id"], "bob")
    assert call(door, "get_draft", {"draft_id": first["draft_id"]})["status"] == "approved"
    error = refusal(door, "propose_refund", refund(amount_minor=2_600, draft_id=first["draft_id"]))
    assert error.code == "DRAFT_NOT_REVISABLE"
    assert draft_row(runtime, first["draft_id"]).revision == 1


def test_revising_with_unchanged_params_keeps_the_revision(runtime, door):
    first = call(door, "propose_refund", refund())
    before = counts(runtime)
    again = call(door, "propose_refund", refund(draft_id=first["draft_id"]))
    assert (again["draft_id"], again["revision"], again["replayed"]) == (
        first["draft_id"],
        1,
        True,
    )
    after = counts(runtime)
    assert (after["drafts"], after["draft_revisions"]) == (
        before["drafts"],
        before["draft_revisions"],
    )


def test_revising_with_another_actions_tool_is_refused(runtime, door):
    refund_view = call(door, "propose_refund", refund())
    before = counts(runtime)
    error = refusal(
        door,
        "propose_cancel_order",
        {"order_id": "ORD-1002", "reason": "customer_request", "draft_id": refund_view["draft_id"]},
    )
    assert error.code == "DRAFT_ACTION_MISMATCH"
    assert error.category is Category.CONFLICT
    assert "propose_refund" in error.suggested_action
    assert counts(runtime) == {**before, "audit_events": before["audit_events"] + 1}
    draft = draft_row(runtime, refund_view["draft_id"])
    assert (draft.action, draft.revision) == ("refund", 1)


def test_revising_someone_elses_draft_is_unavailable(runtime, door, other_door):
    ada = call(door, "propose_refund", refund())
    foreign = refusal(
        other_door,
        "propose_refund",
        refund(order_id="ORD-2001", amount_minor=999, draft_id=ada["draft_id"]),
    )
    missing = refusal(
        other_door,
        "propose_refund",
        refund(order_id="ORD-2001", amount_minor=999, draft_id="dft_" + "0" * 32),
    )
    assert foreign.code == "DRAFT_UNAVAILABLE"
    assert foreign.category is Category.UNAVAILABLE
    assert foreign.to_dict() == missing.to_dict()
    draft = draft_row(runtime, ada["draft_id"])
    assert (draft.revision, draft.params_sha256) == (1, ada["params_sha256"])


def test_another_agent_for_the_same_customer_cannot_revise(runtime, door):
    ada = call(door, "propose_refund", refund())
    second_agent = ToolDoor(runtime, stdio_token=issue_agent_token(runtime, "bot-2", "cust-ada"))
    error = refusal(
        second_agent, "propose_refund", refund(amount_minor=10, draft_id=ada["draft_id"])
    )
    assert error.code == "DRAFT_UNAVAILABLE"


@both_backends
def test_revising_an_expired_draft_is_refused(runtime, door):
    first = call(door, "propose_refund", refund())
    expire_draft(runtime, first["draft_id"])
    before = counts(runtime)
    error = refusal(door, "propose_refund", refund(amount_minor=2_600, draft_id=first["draft_id"]))
    assert error.code == "DRAFT_NOT_REVISABLE"
    assert error.category is Category.CONFLICT
    assert "expired" in error.message
    after = counts(runtime)
    assert (after["drafts"], after["draft_revisions"]) == (
        before["drafts"],
        before["draft_revisions"],
    )
    assert draft_row(runtime, first["draft_id"]).revision == 1


@both_backends
def test_an_expired_draft_is_reported_expired_and_cannot_be_revised(runtime, door):
    first = call(door, "propose_refund", refund())
    expire_draft(runtime, first["draft_id"])
    status = call(door, "get_draft", {"draft_id": first["draft_id"]})
    assert status["status"] == "expired"
    assert status["reason"] == "it was not approved and executed before it expired"
    assert "expired" in status["message"]
    assert "propose it again" in status["next_action"]
    # get_draft is a read: it reports the expiry and writes nothing (the sweeper records it).
    assert draft_row(runtime, first["draft_id"]).status == "proposed"
    assert events(runtime, type_="draft.expired", draft_id=first["draft_id"]) == []
    error = refusal(door, "propose_refund", refund(amount_minor=2_600, draft_id=first["draft_id"]))
    assert error.code == "DRAFT_NOT_REVISABLE"


@pytest.mark.parametrize("status", ["approved", "rejected", "queued", "succeeded"])
def test_only_a_proposed_draft_can_be_revised(runtime, door, status):
    first = call(door, "propose_refund", refund())
    set_status(runtime, first["draft_id"], status)
    error = refusal(door, "propose_refund", refund(amount_minor=2_600, draft_id=first["draft_id"]))
    assert error.code == "DRAFT_NOT_REVISABLE"
    assert status in error.message


@both_backends
def test_revising_into_another_open_drafts_params_is_refused(runtime, door):
    first = call(door, "propose_refund", refund(amount_minor=1_000))
    second = call(door, "propose_refund", refund(amount_minor=2_000))
    error = refusal(door, "propose_refund", refund(amount_minor=1_000, draft_id=second["draft_id"]))
    assert error.code == "DUPLICATE_OPEN_DRAFT"
    assert error.details == {"draft_id": first["draft_id"]}


def test_a_revision_must_still_pass_business_validation(runtime, door):
    first = call(door, "propose_refund", refund())
    error = refusal(door, "propose_refund", refund(amount_minor=78_501, draft_id=first["draft_id"]))
    assert error.code == "REFUND_EXCEEDS_REFUNDABLE"
    assert draft_row(runtime, first["draft_id"]).revision == 1


# --- reading ------------------------------------------------------------------------------


def test_get_draft_returns_the_current_state(runtime, door):
    first = call(door, "propose_refund", refund(amount_minor=78_500))
    status = call(door, "get_draft", {"draft_id": first["draft_id"]})
    for field in ("draft_id", "status", "revision", "summary", "params_sha256", "approvals"):
        assert status[field] == first[field]
    assert status["replayed"] is False


def test_get_draft_of_another_customers_draft_is_like_a_missing_one(runtime, door, other_door):
    ada = call(door, "propose_refund", refund())
    foreign = refusal(other_door, "get_draft", {"draft_id": ada["draft_id"]})
    missing = refusal(other_door, "get_draft", {"draft_id": "dft_" + "f" * 32})
    assert foreign.code == "DRAFT_UNAVAILABLE"
    assert foreign.category is Category.UNAVAILABLE
    assert foreign.to_dict() == missing.to_dict()
    assert ada["draft_id"] not in foreign.message


def test_get_draft_refuses_malformed_ids(runtime, door):
    error = refusal(door, "get_draft", {"draft_id": "dft_../../etc"})
    assert error.code == "INVALID_ARGUMENT"
