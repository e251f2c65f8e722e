"""Security issue §1: an agent cannot draw on the approver's screen. Free text that could hide
or fake what a human reads (terminal escapes, bidi overrides, zero-width and other invisible
characters, lone surrogates) is refused, naming the field; text is stored NFC-normalised."""

from __future__ import annotations

import json

import pytest
from sqlmodel import Session, func, select

from service.drafts.models import Draft
from service.errors import DomainError
from tests.security.helpers import agent, propose_refund

HOSTILE = {
    "ansi-conceal": "refund ok\x1b[8m hidden real params",
    "carriage-return": "looks fine\rREWRITTEN",
    "nul": "a\x00b",
    "rtl-override": "amount 1000\u202e00.01",
    "rtl-isolate": "\u2067reversed\u2069",
    "zero-width-space": "ORD-1004\u200b",
    "zero-width-joiner": "a\u200db",
    "bom": "\ufeffnote",
    "line-separator": "line\u2028break",
    "private-use": "\ue000",
    "lone-surrogate": "\ud800",
}
ADDRESS = {
    "recipient": "Ada Lovelace",
    "lines": ["12 St James's Square"],
    "district": "Westminster",
    "city": "London",
    "postal_code": "SW1Y 4JH",
    "country": "GB",
}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url  # input validation does not depend on the database


def drafts(runtime) -> int:
    with Session(runtime.engine) as session:
        return session.exec(select(func.count()).select_from(Draft)).one()


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_text_in_a_note_is_refused_naming_the_field(runtime, demo, text):
    with pytest.raises(DomainError) as refused:
        propose_refund(agent(runtime, demo), note=text)
    assert refused.value.code == "INVALID_ARGUMENT"
    (problem,) = refused.value.details["problems"]
    assert problem.startswith(("note: contains U+", "note: contains a lone surrogate"))
    assert text not in json.dumps(refused.value.to_dict(), ensure_ascii=False)  # never echoed
    assert drafts(runtime) == 0


@pytest.mark.parametrize("field", ["recipient", "district", "city", "lines"])
def test_hostile_text_in_any_address_field_is_refused(runtime, demo, field):
    value = ["1 Main St\u202e"] if field == "lines" else "Kensington\x1b[2J"
    arguments = {"order_id": demo["orders"]["paid"], "address": {**ADDRESS, field: value}}
    with pytest.raises(DomainError) as refused:
        agent(runtime, demo).call("propose_change_shipping_address", arguments, "0" * 32, None)
    (problem,) = refused.value.details["problems"]
    assert problem.startswith(f"address.{field}")
    assert "contains U+" in problem


def test_text_is_stored_in_normal_form_c(runtime, demo):
    decomposed = "Cafe\u0301 au lait"  # "é" as e + combining acute
    draft = propose_refund(agent(runtime, demo), note=decomposed)
    with Session(runtime.engine) as session:
        stored = session.get(Draft, draft["draft_id"])
        assert stored is not None
        assert stored.params["note"] == "Caf\u00e9 au lait"


def test_plain_text_in_any_script_is_accepted(runtime, demo):
    for note in ("Colis abîmé à l'arrivée", "包裹损坏", "Пакет повреждён", "📦 broken"):
        assert propose_refund(agent(runtime, demo), note=note)["status"] == "proposed"


def test_a_rejection_reason_must_be_plain_text_too(runtime, demo):
    from service.approvals.schemas import ApprovalStatement
    from service.validation import parse

    statement = {
        "type": "draftgate.approval.v1",
        "tenant": "demo",
        "draft_id": "dft_" + "0" * 32,
        "revision": 1,
        "action": "refund",
        "contract_version": 1,
        "params_sha256": "0" * 64,
        "decision": "reject",
        "approver": "alice",
        "key_id": "k",
        "issued_at": "2026-11-29T10:00:00Z",
    }
    for reason, expected in (("no\x1b[8m", "control"), ("e\u0301", "normal form C")):
        with pytest.raises(DomainError) as refused:
            parse(ApprovalStatement, {**statement, "reason": reason})
        assert expected in refused.value.message


def test_a_lone_surrogate_in_a_field_name_is_refused_and_the_refusal_is_recorded(runtime, demo):
    from tests.security.helpers import events

    with pytest.raises(DomainError) as refused:
        agent(runtime, demo).call("list_orders", {"\ud800": 1}, "0" * 32, None)
    assert refused.value.code == "INVALID_ARGUMENT"
    [event] = events(runtime, "tool.refused")
    assert event.data["error"]["code"] == "INVALID_ARGUMENT"
    assert "\ud800" not in json.dumps(event.data)
