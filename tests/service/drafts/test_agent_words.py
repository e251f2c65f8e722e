"""What the agent and the approver are told, in words (issue 20's wording list): a finished
draft whose outcome summary ends in a full stop is "Done: ….", once; a draft that can no
longer be decided says why in a sentence, never "the draft is succeeded"."""

from __future__ import annotations

from datetime import timedelta

from service.approvals import progress
from service.drafts.models import Draft, DraftStatus
from service.drafts.schemas import agent_view
from service.sessions.card import WHERE_IT_STANDS
from service.sql import utcnow


def _draft() -> Draft:
    now = utcnow()
    return Draft(
        id="dft_" + "0" * 32,
        tenant="demo",
        action="memory_create",
        contract_version=1,
        revision=1,
        params={},
        params_sha256="a" * 64,
        summary="Create entities",
        risk="low",
        policy={"rule": "any amount: 1 approver"},
        approvals_required=1,
        proposed_by="support-agent",
        status=DraftStatus.SUCCEEDED,
        created_at=now,
        updated_at=now,
        expires_at=now + timedelta(hours=1),
    )


def test_a_summary_with_its_own_full_stop_is_said_once():
    standing = progress.ApprovalProgress(
        draft_id="dft_" + "0" * 32,
        revision=1,
        required=1,
        verdicts=(),
        proposers=frozenset({"support-agent"}),
    )
    outcome = {"summary": "Create entities: done (the upstream answered HTTP 201)."}
    view = agent_view(
        _draft(),
        status=DraftStatus.SUCCEEDED,
        reason=None,
        masked_params={},
        standing=standing,
        outcome=outcome,
    )
    assert view.message == "Done: Create entities: done (the upstream answered HTTP 201)."


def test_every_status_has_its_sentence():
    assert set(WHERE_IT_STANDS) == set(DraftStatus)
    assert all(words.startswith("the draft") for words in WHERE_IT_STANDS.values())
    assert "succeeded" not in WHERE_IT_STANDS[DraftStatus.SUCCEEDED]
