"""The offline verifier on files that are not a clean, complete, single-tenant export.

Most chains here are built with an independent implementation of the documented
construction (``rfc8785`` + ``hashlib`` + ``cryptography``), so the verifier is checked
against docs/audit.md rather than against the service's own hashing code. The filtered
export comes from the real API.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from harness.approvals import bearer
from harness.servers import serve
from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.audit.offline import (
    ExportError,
    Verdict,
    read_checkpoints,
    read_trust_file,
    trust_document,
    unanchored_reason,
    verdict,
    verify_export,
)
from service.tracing import new_trace_id

GENESIS = "0" * 64


# --- an independent implementation of docs/audit.md -----------------------------------------


def documented_hash(event: dict[str, Any]) -> str:
    body = {
        name: event[name]
        for name in (
            "seq",
            "at",
            "tenant",
            "actor",
            "type",
            "draft_id",
            "execution_id",
            "trace_id",
            "data",
            "prev_hash",
        )
    }
    return hashlib.sha256(b"draftgate.audit.v1\n" + rfc8785.dumps(body)).hexdigest()


def chain(tenant: str, count: int) -> list[dict[str, Any]]:
    events, previous = [], GENESIS
    for seq in range(1, count + 1):
        event = {
            "seq": seq,
            "at": f"2026-11-30T10:00:{seq:02d}.{seq:06d}Z",
            "tenant": tenant,
            "actor": "agent:support-agent" if seq % 2 else "approver:alice",
            "type": "tool.called" if seq % 2 else "approval.approved",
            "draft_id": None if seq % 3 else f"dft_{seq:032x}",
            "execution_id": None,
            "trace_id": f"{seq:032x}",
            "data": {"n": seq, "note": "Café ☕", "nested": {"b": [1, 2.5, None]}},
            "prev_hash": previous,
        }
        event["hash"] = documented_hash(event)
        previous = event["hash"]
        events.append(event)
    return events


def lines_of(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(event, ensure_ascii=False) + "\n" for event in events]


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class CheckpointKey:
    def __init__(self) -> None:
        self.key = Ed25519PrivateKey.generate()
        raw = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.public = b64url(raw)
        self.key_id = "ed25519-" + hashlib.sha256(raw).hexdigest()[:16]

    def checkpoint(self, tenant: str, seq: int, hash_: str) -> dict[str, Any]:
        statement = {
            "type": "draftgate.checkpoint.v1",
            "tenant": tenant,
            "seq": seq,
            "hash": hash_,
            "at": "2026-11-30T11:00:00.000000Z",
        }
        signature = b64url(self.key.sign(rfc8785.dumps(statement)))
        return {**statement, "key_id": self.key_id, "signature": signature}

    def document(self, tenant: str, checkpoints: list[dict[str, Any]]) -> str:
        return json.dumps(
            {
                "tenant": tenant,
                "public_key": self.public,
                "key_id": self.key_id,
                "checkpoints": checkpoints,
            }
        )


@pytest.fixture
def key() -> CheckpointKey:
    return CheckpointKey()


# --- sanity: the independent chain verifies -------------------------------------------------


def test_a_complete_chain_built_from_the_documentation_verifies(key):
    events = chain("acme", 12)
    checkpoints = [
        key.checkpoint("acme", 5, events[4]["hash"]),
        key.checkpoint("acme", 12, events[11]["hash"]),
    ]

    result = verify_export(
        lines_of(events), checkpoints=checkpoints, checkpoint_public_key=key.public
    )

    assert result.ok is True, result.problem
    assert (result.events_checked, result.head_seq, result.head_hash) == (
        12,
        12,
        events[-1]["hash"],
    )
    assert result.checkpoints_checked == 2


def test_windows_line_endings_and_blank_lines_do_not_matter():
    events = chain("acme", 4)
    lines = [line.replace("\n", "\r\n") for line in lines_of(events)]
    lines.insert(2, "\r\n")
    lines.append("\n")

    assert verify_export(lines).ok is True


# --- empty exports --------------------------------------------------------------------------


@pytest.mark.parametrize("lines", [[], ["\n", "  \n"]], ids=["no-lines", "blank-lines"])
def test_an_empty_export_has_nothing_to_contradict_without_checkpoints(lines):
    result = verify_export(lines)

    assert (result.ok, result.events_checked, result.head_seq, result.head_hash) == (
        True,
        0,
        0,
        GENESIS,
    )


def test_an_empty_export_is_a_truncation_when_a_checkpoint_says_the_log_had_events(key):
    events = chain("acme", 3)

    result = verify_export(
        [],
        checkpoints=[key.checkpoint("acme", 3, events[-1]["hash"])],
        checkpoint_public_key=key.public,
    )

    assert result.ok is False
    assert result.first_bad_seq == 1
    assert result.events_checked == 0
    assert "truncated" in result.problem


# --- files that are not exports -------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("{not json", id="broken-json"),
        pytest.param("seq=4 hash=abc", id="plain-text"),
        pytest.param('{"seq": 4, "tenant": "acme", "hash": "ab', id="line-cut-mid-stream"),
    ],
)
def test_a_non_json_line_is_an_error_naming_the_line(bad):
    lines = lines_of(chain("acme", 5))
    lines[3] = bad + "\n"

    with pytest.raises(ExportError, match="line 4 is not JSON"):
        verify_export(lines)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param([1, 2, 3], id="array"),
        pytest.param("an event", id="string"),
        pytest.param(42, id="number"),
        pytest.param(None, id="null"),
        pytest.param({"event": "tool.called"}, id="object-without-chain-fields"),
        pytest.param({"seq": 2, "hash": "ab"}, id="no-prev-hash"),
    ],
)
def test_a_line_that_is_not_an_event_is_an_error_naming_the_line(bad):
    lines = lines_of(chain("acme", 5))
    lines[1] = json.dumps(bad) + "\n"

    with pytest.raises(ExportError, match="line 2 is not an audit event"):
        verify_export(lines)


def without(event: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in names}


@pytest.mark.parametrize(
    "make_bad",
    [
        pytest.param(lambda e: without(e, "tenant"), id="no-tenant"),
        pytest.param(lambda e: without(e, "at"), id="no-at"),
        pytest.param(lambda e: without(e, "data", "actor", "type"), id="only-chain-fields"),
        pytest.param(lambda e: {**e, "seq": "two"}, id="seq-not-a-number"),
        pytest.param(lambda e: {**e, "seq": None}, id="seq-null"),
    ],
)
@pytest.mark.parametrize("position", [0, 2], ids=["first-line", "third-line"])
def test_an_event_missing_fields_is_reported_not_a_crash(make_bad, position):
    """BUG: offline.py only checks for seq/hash/prev_hash, so a line without ``tenant`` (first
    line) or ``at`` raises KeyError, and a non-numeric seq raises a bare ValueError/TypeError;
    ``draftgate audit verify --file`` (which catches only ExportError) dies with a traceback."""
    events = chain("acme", 5)
    lines = lines_of(events)
    lines[position] = json.dumps(make_bad(events[position])) + "\n"

    try:
        result = verify_export(lines)
    except ExportError:
        return  # refused as a malformed export: fine
    assert result.ok is False
    assert result.first_bad_seq == position + 1


def test_a_line_with_fields_outside_the_hash_is_not_accepted_as_verified():
    """DOUBTFUL: an export line is "exactly as hashed"; content the hash does not cover
    (here a forged note on an approval) verifies as ok, so a reader of the verified file can
    be shown unprotected data."""
    events = chain("acme", 4)
    events[1] = {**events[1], "note": "approved by the CFO in person"}

    try:
        result = verify_export(lines_of(events))
    except ExportError:
        return
    assert result.ok is False
    assert result.first_bad_seq == 2


# --- tenants --------------------------------------------------------------------------------


def test_an_export_mixing_tenants_is_refused():
    lines = lines_of(chain("acme", 3)) + lines_of(chain("other", 2))

    with pytest.raises(ExportError, match="mixes tenants"):
        verify_export(lines)


def test_one_foreign_event_in_the_middle_is_refused():
    events = chain("acme", 5)
    foreign = chain("other", 5)
    lines = lines_of([*events[:2], foreign[2], *events[3:]])

    with pytest.raises(ExportError, match="mixes tenants"):
        verify_export(lines)


def test_checkpoints_of_another_tenant_are_ignored_but_the_own_ones_count(key):
    acme, other = chain("acme", 6), chain("other", 9)
    checkpoints = [
        key.checkpoint("acme", 6, acme[-1]["hash"]),
        key.checkpoint("other", 9, other[-1]["hash"]),  # beyond acme's end: not acme's business
    ]

    result = verify_export(
        lines_of(acme), checkpoints=checkpoints, checkpoint_public_key=key.public
    )

    assert result.ok is True, result.problem
    assert result.checkpoints_checked == 1


def test_an_export_that_no_given_checkpoint_covers_is_not_silently_ok(key):
    """DOUBTFUL: checkpoints of other tenants are dropped silently, so verifying an export with
    the wrong tenant's (or a forged tenant name's) chain against the auditor's pinned
    checkpoints answers ok with 0 checkpoints checked, exit 0. A chain rewritten under another
    tenant name, served to an auditor whose token was moved to that tenant, passes."""
    rewritten = chain("demo-forged", 8)
    pinned = [key.checkpoint("demo", 8, chain("demo", 8)[-1]["hash"])]

    result = verify_export(
        lines_of(rewritten), checkpoints=pinned, checkpoint_public_key=key.public
    )

    assert result.ok is False


# --- gaps and order -------------------------------------------------------------------------


@pytest.mark.parametrize("missing", [1, 4, 7])
def test_a_missing_line_is_reported_as_the_missing_seq(missing):
    events = chain("acme", 7)
    kept = [e for e in events if e["seq"] != missing]

    result = verify_export(lines_of(kept))

    if missing == 7:  # the tail: nothing to notice without a checkpoint
        assert result.ok is True
        assert result.head_seq == 6
        return
    assert result.ok is False
    assert result.first_bad_seq == missing
    assert "missing" in result.problem


def test_a_missing_tail_is_caught_by_a_checkpoint(key):
    events = chain("acme", 7)

    result = verify_export(
        lines_of(events[:5]),
        checkpoints=[key.checkpoint("acme", 7, events[-1]["hash"])],
        checkpoint_public_key=key.public,
    )

    assert result.ok is False
    assert result.first_bad_seq == 6
    assert "truncated" in result.problem


@pytest.mark.parametrize("repeated", [3, 1], ids=["the-previous-line", "an-earlier-line"])
def test_a_repeated_line_is_reported_at_the_seq_expected_there(repeated):
    """BUG (minor): verification.py reports ``min(seq, expected_seq)``, so a repeated or
    backwards seq is blamed on an event that was verified a moment earlier: here
    events_checked is 3 (seqs 1-3 are fine) yet first_bad_seq names seq 3 or seq 1."""
    events = chain("acme", 5)

    result = verify_export(lines_of([*events[:3], events[repeated - 1], *events[3:]]))

    assert result.ok is False
    assert result.events_checked == 3
    assert result.first_bad_seq == 4


def test_lines_out_of_order_are_reported():
    events = chain("acme", 5)

    result = verify_export(lines_of([events[0], events[2], events[1], *events[3:]]))

    assert result.ok is False
    assert result.first_bad_seq == 2


def test_checkpoints_without_a_public_key_are_refused_not_skipped(key):
    events = chain("acme", 3)

    with pytest.raises(ValueError, match="public key"):
        verify_export(lines_of(events), checkpoints=[key.checkpoint("acme", 3, events[-1]["hash"])])


# --- the checkpoints file -------------------------------------------------------------------


def test_the_checkpoints_file_is_read_with_the_key_it_claims(key):
    document = key.document("acme", [key.checkpoint("acme", 1, "a" * 64)])

    stored, claimed = read_checkpoints(document)

    assert claimed == key.public
    assert [c["seq"] for c in stored] == [1]
    assert read_checkpoints(json.dumps(stored)) == (stored, None)


@pytest.mark.parametrize("text", ["not json", "{}", '{"checkpoints": 5}', "42"])
def test_a_checkpoints_file_that_is_not_one_is_an_error(text):
    with pytest.raises(ExportError):
        read_checkpoints(text)


# --- anchoring: the verdict and its exit code ----------------------------------------------


def test_a_chain_covered_to_its_last_event_by_a_pinned_checkpoint_is_anchored(key):
    events = chain("acme", 6)

    result = verify_export(
        lines_of(events),
        checkpoints=[key.checkpoint("acme", 6, events[-1]["hash"])],
        checkpoint_public_key=key.public,
    )

    assert (result.anchored, result.anchored_seq) == (True, 6)
    assert verdict(result) is Verdict.OK


@pytest.mark.parametrize("checkpointed", [[], [4], [2, 4]], ids=["zero", "one", "two"])
def test_a_chain_that_links_but_whose_tail_no_checkpoint_covers_is_unanchored(key, checkpointed):
    """Before: both verified ``ok`` (exit 0), though deleting the tail could not be noticed."""
    events = chain("acme", 6)
    given = [key.checkpoint("acme", seq, events[seq - 1]["hash"]) for seq in checkpointed]

    result = verify_export(lines_of(events), checkpoints=given, checkpoint_public_key=key.public)

    newest = max(checkpointed, default=0)
    assert result.ok is True
    assert (result.anchored, result.anchored_seq) == (False, newest)
    assert verdict(result) is Verdict.UNANCHORED
    reason = unanchored_reason(result)
    assert reason.startswith("unanchored: truncation of the tail cannot be detected")
    assert f"seq {newest + 1} to 6" in reason


def test_an_empty_export_without_checkpoints_is_unanchored_not_ok():
    result = verify_export([], checkpoint_public_key=CheckpointKey().public)

    assert result.ok is True
    assert result.anchored is False
    assert verdict(result) is Verdict.UNANCHORED
    assert "empty" in unanchored_reason(result)


def test_a_tampered_chain_is_tampered_whatever_its_anchoring(key):
    events = chain("acme", 6)
    events[2] = {**events[2], "actor": "approver:mallory"}

    result = verify_export(lines_of(events), checkpoint_public_key=key.public)

    assert verdict(result) is Verdict.TAMPERED
    assert result.first_bad_seq == 3


def test_exit_codes_are_the_documented_ones():
    assert [(v.name, int(v)) for v in Verdict] == [
        ("OK", 0),
        ("TAMPERED", 1),
        ("CANNOT_VERIFY", 2),
        ("UNANCHORED", 3),
    ]


# --- pinning: the key inside the checkpoints file is never trusted --------------------------


def test_a_checkpoints_file_naming_another_key_than_the_pinned_one_fails(key):
    """The rewriter's own key signs the rewritten chain and is named by the file: the
    signatures are fine, but not by the pinned key, so they never count."""
    forger = CheckpointKey()
    events = chain("acme", 5)
    stored, claimed = read_checkpoints(
        forger.document("acme", [forger.checkpoint("acme", 5, events[-1]["hash"])])
    )

    result = verify_export(
        lines_of(events),
        checkpoints=stored,
        checkpoint_public_key=key.public,
        claimed_public_key=claimed,
    )

    assert result.ok is False
    assert "unpinned key never count" in result.problem
    assert forger.key_id in result.problem
    assert verdict(result) is Verdict.TAMPERED


def test_a_checkpoints_file_naming_the_pinned_key_verifies(key):
    events = chain("acme", 5)
    stored, claimed = read_checkpoints(
        key.document("acme", [key.checkpoint("acme", 5, events[-1]["hash"])])
    )

    result = verify_export(
        lines_of(events),
        checkpoints=stored,
        checkpoint_public_key=key.public,
        claimed_public_key=claimed,
    )

    assert verdict(result) is Verdict.OK, result.problem


def documented_trust_file(key: CheckpointKey) -> str:
    return json.dumps(
        {"type": "draftgate.checkpoint_key.v1", "public_key": key.public, "key_id": key.key_id}
    )


def test_the_trust_file_is_read_as_documented(key):
    assert read_trust_file(documented_trust_file(key)) == key.public
    assert json.loads(documented_trust_file(key)) == trust_document(key.public)
    without_id = json.dumps({"type": "draftgate.checkpoint_key.v1", "public_key": key.public})
    assert read_trust_file(without_id) == key.public


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda k: k.document("acme", []), id="a-checkpoints-file"),
        pytest.param(lambda k: k.public, id="the-bare-key"),
        pytest.param(lambda k: json.dumps({"public_key": k.public}), id="no-type"),
        pytest.param(
            lambda k: documented_trust_file(k).replace(k.key_id, "ed25519-" + "0" * 16),
            id="key-id-of-another-key",
        ),
        pytest.param(
            lambda k: json.dumps({"type": "draftgate.checkpoint_key.v1", "public_key": "abc"}),
            id="not-a-key",
        ),
        pytest.param(
            lambda k: json.dumps({"type": "draftgate.checkpoint_key.v1", "public_key": 7}),
            id="key-not-a-string",
        ),
        pytest.param(lambda k: "[]", id="a-list"),
    ],
)
def test_what_is_not_a_trust_file_is_refused(key, make):
    with pytest.raises(ExportError, match="trust file"):
        read_trust_file(make(key))


# --- a filtered export from the real API ----------------------------------------------------


@pytest.fixture
def api(runtime, demo) -> Iterator[str]:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    for _ in range(3):
        door.call("list_orders", {}, new_trace_id(), None)
        door.call("get_order", {"order_id": demo["orders"]["paid"]}, new_trace_id(), None)
    with serve(create_app(runtime)) as url:
        yield url


def export(api: str, demo: dict[str, Any], **filters: str) -> list[str]:
    response = httpx.get(
        f"{api}/v1/audit/export",
        params=filters,
        headers=bearer(demo["tokens"]["auditor"]),
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.text.splitlines(keepends=True)


def test_a_filtered_export_is_reported_as_missing_seqs_not_accepted(demo, api):
    complete = [json.loads(line) for line in export(api, demo)]
    filtered = export(api, demo, type="tool.called")
    seqs = [json.loads(line)["seq"] for line in filtered]
    first_missing = next(
        e["seq"] for e in complete if e["type"] != "tool.called" and e["seq"] < seqs[-1]
    )

    result = verify_export(filtered)

    assert verify_export(export(api, demo)).ok is True
    assert result.ok is False
    assert result.first_bad_seq == first_missing
    assert "missing" in result.problem


def test_an_export_starting_after_seq_1_is_reported_at_seq_1(demo, api):
    complete = [json.loads(line) for line in export(api, demo)]
    since = next(e["at"] for e in complete if e["at"] != complete[0]["at"])

    result = verify_export(export(api, demo, since=since))

    assert result.ok is False
    assert result.first_bad_seq == 1
    assert result.events_checked == 0
