"""A new source of signed decisions plugs into the progress owner without a second count.

Standing grants and batch statements (issues 20 and 21) will be sources like the stored
approvals: each loads its signed decisions for a page of drafts and brings their proof (what
the signature covers, how it verifies). This test plugs in a small source of its own, a
grant signed with an approver's registered Ed25519 key over a JSON object naming the action,
and shows that everything else is the owner's: the approver's key must be registered and not
revoked, the proposer's grant never counts, one approver counts once, and the approve path,
the execute gate and the views all read the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlmodel import Session

from mcp_adapter.tools import ToolDoor
from service.approvals import progress
from service.approvals.schemas import SCHEME_ED25519, Decision
from service.canonical import canonical_json
from service.db import session_scope
from service.drafts import review
from service.drafts.models import Draft
from service.keys import actions as keys
from service.keys.assertions import RelyingParty
from service.keys.models import ApproverKey
from service.keys.repository import Credential
from service.signing import generate_private_key, load_private_key, public_key_b64, sign, verify
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.support.core import approve_in_core, request_execution_in_core


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@dataclass(frozen=True)
class Grant:
    approver: str
    key_id: str
    action: str
    signature: str

    def statement(self) -> dict[str, Any]:
        return {"type": "test.grant", "approver": self.approver, "action": self.action}


@dataclass(frozen=True)
class GrantProof:
    grant: Grant

    def binding_problem(self, draft: Draft, digest: str) -> str | None:
        return None if draft.action == self.grant.action else "the grant is for another action"

    def signature_problem(self, key: Credential, party: RelyingParty) -> str | None:
        signed = canonical_json(self.grant.statement())
        if isinstance(key, ApproverKey) and verify(key.public_key, signed, self.grant.signature):
            return None
        return "the grant's signature does not verify"


@dataclass(frozen=True)
class Grants:
    """A source: every grant bears on every draft, counted for its current revision."""

    grants: tuple[Grant, ...]

    def load(
        self,
        session: Session,
        rules: progress.Rules,
        drafts: Sequence[Draft],
        *,
        new: frozenset[str],
    ) -> dict[str, list[progress.SignedDecision]]:
        return {
            draft.id: [
                progress.SignedDecision(
                    reference=f"grant-{index}",
                    approver=grant.approver,
                    key_id=grant.key_id,
                    scheme=SCHEME_ED25519,
                    decision=Decision.APPROVE,
                    reason=None,
                    issued_at="2026-01-01T00:00:00Z",
                    signed_at=draft.created_at,
                    revision=draft.revision,
                    proof=GrantProof(grant),
                )
                for index, grant in enumerate(self.grants)
            ]
            for draft in drafts
        }


def grant_of(approver: str, key_id: str, key: Ed25519PrivateKey) -> Grant:
    unsigned = Grant(approver, key_id, "refund", "")
    return Grant(approver, key_id, "refund", sign(key, canonical_json(unsigned.statement())))


def demo_key(demo: dict[str, Any], approver: str) -> Ed25519PrivateKey:
    return load_private_key(Path(demo["approvers"][approver]["private_key_file"]))


def propose_large(runtime, demo) -> str:
    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 60_000, "currency": "USD"},
        "reason": "damaged",
    }
    return str(door.call("propose_refund", arguments, new_trace_id(), None)["draft_id"])


def detail(runtime, demo, draft_id: str) -> Any:
    with session_scope(runtime.engine) as session:
        auditor = tokens.authenticate(session, demo["tokens"]["auditor"])
        return review.get_detail(session, auditor, draft_id, runtime=runtime, now=utcnow())


def test_a_grant_from_a_new_source_counts_toward_the_quorum_everywhere(runtime, demo, monkeypatch):
    bob = grant_of("bob", demo["approvers"]["bob"]["key_id"], demo_key(demo, "bob"))
    monkeypatch.setattr(progress, "SOURCES", (*progress.SOURCES, Grants((bob,))))
    draft_id = propose_large(runtime, demo)  # needs two approvers
    assert detail(runtime, demo, draft_id).progress.approvers == ["bob"]

    approve_in_core(runtime, demo, draft_id, "alice")  # the approve path counts bob's grant

    shown = detail(runtime, demo, draft_id)
    assert (shown.status, shown.progress.approvers, shown.progress.met) == (
        "approved",
        ["alice", "bob"],
        True,
    )
    [grant] = [a for a in shown.approvals if a.approval_id == "grant-0"]
    assert (grant.counts, grant.problem) == (True, None)
    execution, created = request_execution_in_core(runtime, demo, draft_id)
    assert (created, execution.status) == (True, "queued")


def test_a_grant_meets_every_rule_of_the_owner(runtime, demo, monkeypatch):
    draft_id = propose_large(runtime, demo)
    bob_key = demo["approvers"]["bob"]["key_id"]
    ada = generate_private_key()  # the end user the draft was proposed for, with a key
    with session_scope(runtime.engine) as session:
        registered = keys.register(
            session,
            tenant="demo",
            approver="cust-ada",
            public_key=public_key_b64(ada),
            actor="operator:test",
        )
    forged = Grant("bob", bob_key, "refund", sign(demo_key(demo, "alice"), b"anything"))
    grants = (
        grant_of("bob", bob_key, demo_key(demo, "bob")),
        grant_of("bob", bob_key, demo_key(demo, "bob")),  # the same approver twice
        Grant("alice", bob_key, "refund", "x"),  # someone else's key
        forged,
        grant_of("cust-ada", registered.key_id, ada),  # maker ≠ checker
    )
    monkeypatch.setattr(progress, "SOURCES", (*progress.SOURCES, Grants(grants)))

    problems = [a.problem for a in detail(runtime, demo, draft_id).approvals]

    assert problems == [
        None,
        progress.COUNTED_ONCE,
        progress.KEY_NOT_REGISTERED,
        "the grant's signature does not verify",
        progress.SIGNED_BY_PROPOSER,
    ]
    with session_scope(runtime.engine) as session:
        keys.revoke(session, tenant="demo", key_id=bob_key, actor="admin:root")
    revoked = detail(runtime, demo, draft_id).approvals[0]
    assert (revoked.counts, revoked.problem) == (False, progress.REVOKED_SINCE)
