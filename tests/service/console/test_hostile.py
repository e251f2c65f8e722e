"""A draft full of tricks renders as plain text: HTML and script, a closing </script> in
the params, ANSI escapes, a right-to-left override, zero-width characters, line separators.

The agent proposes what input validation lets through (HTML and script are printable text);
the rest is written into the stored draft directly, as text that came in some other way
would be (a gateway action, an older version): the card must be inert whatever is stored.
"""

from __future__ import annotations

import json

from sqlalchemy import update

from service.canonical import params_sha256
from service.db import session_scope
from service.drafts.models import Draft
from tests.service.console.console import propose, signed_in
from tests.service.console.dom import parse
from tests.service.console.test_card import draft_data

MARKUP = '<script>alert(1)</script><img src=x onerror="alert(2)"><b>bold</b>'
BREAKOUT = '</script><script>alert("out")</script><!--'
ANSI = "\x1b[31mAPPROVED\x1b[0m"
RLO = "refund \u202edraw\u202c 10.00"
ZERO_WIDTH = "ORD\u200b-1004\u2060"
SEPARATORS = "line\u2028break\u2029para"
UNSAFE = ["\x1b", "\u202e", "\u202c", "\u200b", "\u2060", "\u2028", "\u2029"]


def test_a_hostile_draft_renders_inert(browser, door, demo, runtime):
    draft = propose(door, 2_500, note=MARKUP)
    params = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 2_500, "currency": "USD"},
        "reason": "damaged",
        "note": MARKUP,
        "nested": {"breakout": BREAKOUT, "list": [ANSI, RLO, ZERO_WIDTH, SEPARATORS]},
    }
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft)
            .where(Draft.id == draft["draft_id"])
            .values(
                params=params,
                params_sha256=params_sha256(params),
                summary=f"{MARKUP} {ANSI} {RLO} {ZERO_WIDTH} {BREAKOUT}",
            )
        )
    signed_in(browser, demo["tokens"]["approver_alice"])

    response = browser.get(f"/console/drafts/{draft['draft_id']}")
    assert response.status_code == 200
    html = response.text
    document = parse(html)

    # No element came from the agent: only the console's own scripts, no img, no b.
    scripts = document.find_all("script")
    assert [s.attrs.get("id") or s.attrs.get("src") for s in scripts] == [
        "/console/static/vendor/htmx.min.js",
        "draft-data",
        "/console/static/js/card.js",
    ]
    assert document.find_all("img") == []
    assert document.find_all("b") == []
    # No unsafe character reaches the page raw; each is shown as a visible escape.
    for character in UNSAFE:
        assert character not in html, repr(character)
    summary = document.by_id("summary")
    assert summary.find_all("bdi")[0].attrs["class"] == "agent"
    assert summary.text == (
        f"{MARKUP} \\u001b[31mAPPROVED\\u001b[0m refund \\u202edraw\\u202c 10.00 "
        f"ORD\\u200b-1004\\u2060 {BREAKOUT}"
    )
    cells = {
        row.find_all("th")[0].text: row.find_all("td")[0].text
        for row in document.by_id("params").find_all("tr")[1:]
    }
    assert cells["note"] == MARKUP  # shown as the text it is
    assert cells["nested.breakout"] == BREAKOUT
    assert cells["nested.list[0]"] == "\\u001b[31mAPPROVED\\u001b[0m"
    assert cells["nested.list[1]"] == "refund \\u202edraw\\u202c 10.00"
    assert cells["nested.list[3]"] == "line\\u2028break\\u2029para"
    for value_cell in document.by_id("params").find_all("td"):
        assert [b.tag for b in value_cell.find_all("bdi")] == ["bdi"]
    # The JSON block cannot be closed early and gives the JavaScript the exact params.
    [block] = [s for s in scripts if s.attrs.get("id") == "draft-data"]
    assert "</" not in block.text
    assert "<" not in block.text
    assert draft_data(document)["params"] == params
    assert json.loads(block.text)["params_sha256"] == params_sha256(params)


def test_the_inbox_renders_the_hostile_summary_inert(browser, door, demo, runtime):
    draft = propose(door, 2_500)
    with session_scope(runtime.engine) as session:
        session.execute(
            update(Draft).where(Draft.id == draft["draft_id"]).values(summary=MARKUP + RLO)
        )
    signed_in(browser, demo["tokens"]["approver_alice"])

    html = browser.get("/console/").text
    row = parse(html).by_id(f"draft-{draft['draft_id']}")

    assert row.find_all("td")[0].find_all("a")[0].text == MARKUP + "refund \\u202edraw\\u202c 10.00"
    assert row.find_all("script") == []
    assert row.find_all("img") == []
    assert "\u202e" not in html


def test_a_multi_line_note_is_a_framed_block_that_imitates_no_row(browser, door, demo):
    """DESIGN.md §3 (round 3): free text may hold line feeds; the card shows them in a block
    of their own, so "ok\\nAmount: 0.01 USD" is never a row of the card's own."""
    note = "ok\nAmount: 0.01 USD\n\tStatus: approved"
    draft = propose(door, 2_500, note=note)
    assert draft["params"]["note"] == note  # accepted as written
    signed_in(browser, demo["tokens"]["approver_alice"])

    html = browser.get(f"/console/drafts/{draft['draft_id']}").text
    document = parse(html)

    cells = {
        row.find_all("th")[0].text: row.find_all("td")[0]
        for row in document.by_id("params").find_all("tr")[1:]
    }
    [block] = cells["note"].find_all("bdi")
    assert block.attrs["class"] == "agent multiline"
    assert block.text == "ok\nAmount: 0.01 USD\n    Status: approved"
    # Wherever the line shows on the page (the params, the trace's call), it is inside a
    # frame: the innermost element showing it is a framed block (the JSON data block the
    # card's script reads holds it too, escaped, and that is not shown).
    showing = [
        element
        for element in document.iter()
        if element.tag != "script" and "Amount: 0.01 USD" in _shown(element)
    ]
    shown_ids = {id(element) for element in showing}
    innermost = [
        element
        for element in showing
        if not any(inner is not element and id(inner) in shown_ids for inner in element.iter())
    ]
    assert len(innermost) >= 1
    assert any(element is block for element in innermost)
    # A one-line rendition (the trace's call, quoting its arguments) may hold the line, but
    # escaped, on the line it belongs to: no line break of its own.
    unframed = [
        e for e in innermost if e.attrs.get("class") != "agent multiline" and "\n" in _shown(e)
    ]
    assert not unframed, [(e.tag, e.attrs, _shown(e)[:300]) for e in unframed]
    assert '"note":"ok\\nAmount: 0.01 USD' in document.by_id("draft-data").text


def _shown(element) -> str:
    """An element's text as a reader sees it: scripts' contents are not shown."""
    return "".join(
        child if isinstance(child, str) else "" if child.tag == "script" else _shown(child)
        for child in element.children
    )
