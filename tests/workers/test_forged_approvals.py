"""The forged approval of issue 17 against a real worker on a real broker.

Someone with database write access plants a small-order public key (the identity) for alice,
and with alice's bearer token posts a statement signed with R = identity, S = 0. The API
refuses it; so they write the approval row and the draft's status themselves, and queue an
execution behind the API's back. The worker re-verifies, finds the key weak, refuses and
audits the refusal; nothing reaches the shop.

BUG (before issue 17): the API accepted the forged approval (201) and the worker executed the
refund ("a refund of 3.00 USD executed with no key").
"""

from __future__ import annotations

import httpx
import pytest

from harness.approvals import bearer, get_draft
from tests.service.approvals.test_forged_approvals import (
    IDENTITY,
    forge,
    plant_forged_approval,
    plant_key,
)
from tests.workers.test_security import (
    SMALL,
    assert_refused_by_the_worker,
    events,
    propose_refund,
    queue_behind_the_apis_back,
)

pytestmark = [
    pytest.mark.full,
    pytest.mark.parametrize("backend", ["postgresql"], indirect=True),
]


def test_a_forged_approval_is_refused_by_the_api_and_by_a_real_worker(stack):
    engine = stack.runtime.engine
    alice = stack.demo["tokens"]["approver_alice"]
    draft_id = propose_refund(stack.runtime, stack.demo, SMALL)
    plant_key(stack.runtime, IDENTITY)

    statement, signature = forge(get_draft(stack.api_url, alice, draft_id), IDENTITY)
    refused = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/approvals",
        json={"statement": statement, "signature": signature},
        headers=bearer(alice),
        timeout=30,
    )

    assert refused.status_code == 400, refused.text
    assert refused.json()["code"] == "WEAK_PUBLIC_KEY"
    [audited] = events(engine, draft_id, "approval.refused")
    assert audited["data"]["error"]["code"] == "WEAK_PUBLIC_KEY"

    # What the old code stored, written by hand; then a real worker is handed the execution.
    plant_forged_approval(stack.runtime, draft_id, IDENTITY)
    execution_id = queue_behind_the_apis_back(stack, draft_id)

    execution = assert_refused_by_the_worker(stack, draft_id, execution_id)
    assert "the signing key is weak and never counts" in execution.error["message"]
    assert "0 of 1 required approvals verify" in execution.error["message"]
