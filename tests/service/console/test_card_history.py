"""The card's history: what changed since the previous revision, and the agent's trace."""

from __future__ import annotations

from service.audit import actions as audit
from service.db import session_scope
from service.sessions.card import MAX_TRACE_STEPS, diff, rows
from service.tracing import new_trace_id
from tests.service.console.console import page, propose, signed_in


def test_a_revision_shows_what_changed_leaf_by_leaf(browser, door, demo):
    first = propose(door, 2_500, note="box dented")
    revised = propose(door, 4_000, draft_id=first["draft_id"])
    assert revised["revision"] == 2
    signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{first['draft_id']}")

    table = card.by_id("diff").find_all("table")[0]
    header = [th.text for th in table.find_all("thead")[0].find_all("th")]
    assert header == ["Field", "Revision 1", "Revision 2"]
    changes = {
        row.find_all("th")[0].text: [td.text for td in row.find_all("td")]
        for row in table.find_all("tbody")[0].find_all("tr")
    }
    assert changes["amount"] == ["25.00 USD (2500 minor units)", "40.00 USD (4000 minor units)"]
    assert changes["note"] == ["box dented", "(removed)"]
    assert "order_id" not in changes  # unchanged leaves are not listed
    assert "(summary)" in changes


def test_the_first_revision_has_no_diff(browser, door, demo):
    draft = propose(door, 2_500)
    signed_in(browser, demo["tokens"]["approver_alice"])
    card = page(browser, f"/console/drafts/{draft['draft_id']}")
    assert "no previous revision" in card.by_id("diff").text


def test_the_card_shows_the_agents_tool_calls_with_masked_arguments(browser, door, demo):
    draft = propose(door, 2_500)
    signed_in(browser, demo["tokens"]["approver_alice"])

    card = page(browser, f"/console/drafts/{draft['draft_id']}")

    steps = card.by_id("trace").find_all("li")
    calls = [s for s in steps if s.attrs["data-type"] == "tool.called"]
    assert len(calls) == 1
    assert "propose_refund" in calls[0].text
    assert "ok" in calls[0].text
    arguments = {
        row.find_all("th")[0].text: row.find_all("td")[0].text for row in calls[0].find_all("tr")
    }
    assert arguments["order_id"] == "ORD-1004"
    assert arguments["amount"] == "25.00 USD (2500 minor units)"
    assert {s.attrs["data-type"] for s in steps} == {"tool.called"}  # the agent's calls only


def test_the_trace_shows_only_the_proposers_tool_calls_and_a_bounded_number(
    browser, door, demo, runtime
):
    """F7: the trace id is the agent's choice. Another caller's events under it are not the
    proposer's story, and however many there are, the card reads a bounded number."""
    trace_id = new_trace_id()
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
    }
    draft = door.call("propose_refund", arguments, trace_id, None)
    with session_scope(runtime.engine) as session:
        for actor, type_ in (("agent:other-bot", "tool.called"), ("system:worker", "x.y")):
            audit.record(session, tenant="demo", actor=actor, type=type_, trace_id=trace_id)
        for _ in range(MAX_TRACE_STEPS + 5):
            audit.record(
                session,
                tenant="demo",
                actor="agent:support-agent",
                type="tool.called",
                trace_id=trace_id,
                data={"tool": "get_order"},
            )
    signed_in(browser, demo["tokens"]["approver_alice"])

    steps = page(browser, f"/console/drafts/{draft['draft_id']}").by_id("trace").find_all("li")

    assert len(steps) == MAX_TRACE_STEPS
    assert {s.attrs["data-type"] for s in steps} == {"tool.called"}
    assert all("other-bot" not in s.text and "system:worker" not in s.text for s in steps)
    assert "propose_refund" in steps[0].text  # oldest first: the proposing call


def test_leaves_paths_and_money():
    value = {
        "a": {"b": [1, {"c": None}], "money": {"amount_minor": 1_250, "currency": "KWD"}},
        "empty": {},
        "flag": True,
        "yen": {"amount_minor": 1_250, "currency": "JPY"},
        "not_money": {"amount_minor": "12", "currency": "USD"},
    }
    assert [(r.path, r.text) for r in rows(value)] == [
        ("a.b[0]", "1"),
        ("a.b[1].c", "null"),
        ("a.money", "1.250 KWD (1250 minor units)"),
        ("empty", "{}"),
        ("flag", "true"),
        ("yen", "1,250 JPY (1250 minor units)"),
        ("not_money.amount_minor", "12"),
        ("not_money.currency", "USD"),
    ]
    assert [(c.path, c.before, c.after) for c in diff({"x": 1, "y": [1]}, {"x": 2, "z": "n"})] == [
        ("x", "1", "2"),
        ("y[0]", "1", None),
        ("z", None, "n"),
    ]
