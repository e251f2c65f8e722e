"""The HTTP API as an OAuth resource server: an approver's or auditor's access token from
the OpenID provider, mapped by its claims, is accepted; anything else is refused, audited,
and answered with a challenge that points to the API's protected-resource metadata."""

from __future__ import annotations

import httpx
import pytest

from harness.approvals import bearer, signed_decision
from tests.oidc.refusals import events_after, last_event_id
from tests.support.mcp_client import connect

pytestmark = pytest.mark.anyio


async def _proposed_draft(host, demo) -> str:
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1_500, "currency": "USD"},
        "reason": "damaged",
    }
    async with connect(host.mcp_url, demo["tokens"]["agent"]) as client:
        result = await client.call_tool("propose_refund", arguments)
    assert not result.is_error, result.content
    draft_id: str = result.structured_content["draft_id"]
    return draft_id


async def test_an_approver_signs_in_with_an_oauth_token_mapped_by_its_claims(
    oauth_host, provider, demo
):
    draft_id = await _proposed_draft(oauth_host, demo)
    token = provider.token("alice-sso", resource=oauth_host.api_url)
    api = oauth_host.api_url
    draft = httpx.get(f"{api}/v1/drafts/{draft_id}", headers=bearer(token), timeout=10)
    assert draft.status_code == 200, draft.text
    key_file = demo["approvers"]["alice"]["private_key_file"]
    body = signed_decision(draft.json(), approver="alice", key_file=key_file)
    approval = httpx.post(
        f"{api}/v1/drafts/{draft_id}/approvals", json=body, headers=bearer(token), timeout=10
    )
    # The token's subject claim is alice, who owns the signing key: her approval counts.
    assert approval.status_code == 201, approval.text
    assert approval.json()["status"] == "approved"


async def test_an_auditor_reads_the_audit_log_with_an_oauth_token(oauth_host, provider, demo):
    token = provider.token("audrey-sso", resource=oauth_host.api_url)
    response = httpx.get(f"{oauth_host.api_url}/v1/audit/verify", headers=bearer(token))
    assert response.status_code == 200, response.text
    assert response.json()["ok"] is True
    # The role comes from the claims: an auditor may not approve.
    drafts = httpx.get(f"{oauth_host.api_url}/v1/drafts", headers=bearer(token))
    assert drafts.status_code == 200
    denied = httpx.post(
        f"{oauth_host.api_url}/v1/drafts/drf_0/execute", headers=bearer(token), timeout=10
    )
    assert (denied.status_code, denied.json()["code"]) == (403, "PERMISSION_DENIED")


@pytest.mark.parametrize(
    ("client_id", "resource_of", "words"),
    [
        pytest.param("alice-sso", "mcp_url", "audience does not include", id="token-for-mcp"),
        pytest.param("no-role", "api_url", "no usable draftgate_role", id="no-role-claim"),
    ],
)
async def test_a_refused_oauth_token_is_a_401_with_the_challenge_and_audited(
    oauth_host, provider, demo, client_id, resource_of, words
):
    token = provider.token(client_id, resource=getattr(oauth_host, resource_of))
    before = last_event_id(oauth_host.runtime)
    response = httpx.get(f"{oauth_host.api_url}/v1/drafts", headers=bearer(token), timeout=10)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["code"] == "UNAUTHENTICATED"
    assert words in response.json()["detail"]
    metadata = f"{oauth_host.api_url}/.well-known/oauth-protected-resource"
    assert response.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", resource_metadata="{metadata}"'
    )
    events = events_after(oauth_host.runtime, before)
    assert [(e.type, e.data["door"]) for e in events] == [("auth.refused", "http")]
    assert words in events[0].data["reason"]
    assert token not in str(events[0].data)


async def test_the_api_publishes_its_metadata_and_challenges_a_missing_token(
    oauth_host, provider, demo
):
    response = httpx.get(f"{oauth_host.api_url}/v1/drafts", timeout=10)
    assert response.status_code == 401
    metadata_url = f"{oauth_host.api_url}/.well-known/oauth-protected-resource"
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    metadata = httpx.get(metadata_url, timeout=10).json()
    assert metadata == {
        "resource": oauth_host.api_url,
        "authorization_servers": [provider.issuer],
        "scopes_supported": ["draftgate"],
        "bearer_methods_supported": ["header"],
        "resource_name": "draftgate HTTP API",
    }
