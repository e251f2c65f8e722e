"""The MCP door as an OAuth resource server, against a real OpenID provider (oidc-provider).

An MCP client with only an OAuth client id and secret is led by the 401 to the
protected-resource metadata, by the metadata to the provider, and proposes a refund with
the token the SDK's own client-credentials flow obtained. Every token that fails a check is
refused, and audited with the check it failed but nothing of the token."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken, ProtectedResourceMetadata

from service.shop.seed import DEMO_CUSTOMER
from tests.oidc.provider_process import OidcProvider, claims_of, secret_of
from tests.oidc.refusals import (
    LIST_TOOLS,
    MCP_HEADERS,
    events_after,
    hs256_with_public_key,
    last_event_id,
    stored_audit_text,
    tampered,
    unsigned,
)

pytestmark = pytest.mark.anyio


class MemoryStorage:
    """The SDK's TokenStorage, in memory (one client run)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def _refund(demo) -> dict:
    return {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1_000, "currency": "USD"},
        "reason": "damaged",
    }


async def test_a_client_with_only_its_client_credentials_proposes_a_refund(
    oauth_host, provider, demo
):
    storage = MemoryStorage()
    auth = ClientCredentialsOAuthProvider(
        server_url=oauth_host.mcp_url,
        storage=storage,
        client_id="support-bot",
        client_secret=secret_of("support-bot"),
        issuer=provider.issuer,
        scope="draftgate",
    )
    before = last_event_id(oauth_host.runtime)
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        Client(streamable_http_client(oauth_host.mcp_url, http_client=http)) as client,
    ):
        result = await client.call_tool("propose_refund", _refund(demo))
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "proposed"
    # The SDK got its token from the provider, for this MCP server (RFC 8707).
    assert storage.tokens is not None
    assert claims_of(storage.tokens.access_token)["aud"] == oauth_host.mcp_url
    # The principal came from the token's claims: the agent, acting for the demo customer.
    created = [e for e in events_after(oauth_host.runtime, before) if e.type == "draft.proposed"]
    assert [(e.actor, e.tenant) for e in created] == [("agent:support-bot", "demo")]
    assert DEMO_CUSTOMER in str(created[0].data)


async def test_without_credentials_the_401_leads_to_the_metadata_and_it_to_the_provider(
    oauth_host, provider, demo
):
    response = httpx.post(oauth_host.mcp_url, json=LIST_TOOLS, headers=MCP_HEADERS, timeout=10)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert "error=" not in challenge  # RFC 6750 §3.1: no error when no token was sent
    metadata_url = challenge.split('resource_metadata="')[1].split('"')[0]
    assert metadata_url.endswith("/.well-known/oauth-protected-resource/mcp")
    body = response.json()
    assert body["code"] == "UNAUTHENTICATED"
    assert provider.issuer in body["suggested_action"]
    assert "draftgate token" in body["suggested_action"]

    metadata = ProtectedResourceMetadata.model_validate(httpx.get(metadata_url).json())
    assert str(metadata.resource) == oauth_host.mcp_url
    assert [str(server).rstrip("/") for server in metadata.authorization_servers] == [
        provider.issuer
    ]
    assert metadata.scopes_supported == ["draftgate"]
    assert metadata.bearer_methods_supported == ["header"]
    root = oauth_host.mcp_url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource"
    assert httpx.get(root).json() == httpx.get(metadata_url).json()
    discovery = httpx.get(f"{provider.issuer}/.well-known/openid-configuration").json()
    assert discovery["issuer"] == provider.issuer
    assert "client_credentials" in discovery["grant_types_supported"]


async def test_the_same_client_without_credentials_gets_the_401_and_calls_nothing(oauth_host, demo):
    seen: list[httpx2.Response] = []

    async def record(response: httpx2.Response) -> None:
        seen.append(response)

    before = last_event_id(oauth_host.runtime)
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK raises a group
        async with (
            httpx2.AsyncClient(timeout=30, event_hooks={"response": [record]}) as http,
            Client(streamable_http_client(oauth_host.mcp_url, http_client=http)) as client,
        ):
            await client.call_tool("propose_refund", _refund(demo))
    assert "MCPError" in repr(raised.value)
    assert seen[0].status_code == 401
    metadata = oauth_host.mcp_url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert f'resource_metadata="{metadata}"' in seen[0].headers["www-authenticate"]
    types = {event.type for event in events_after(oauth_host.runtime, before)}
    assert types == {"auth.refused"}  # refused and audited; no tool ran, no draft


def _resource(host) -> str:
    return host.mcp_url


# Each: how the token is made, and the words of the check its refusal must name.
BadToken = Callable[[OidcProvider, object], str]
REFUSED: dict[str, tuple[BadToken, str]] = {
    "wrong-audience": (
        lambda p, h: p.token("support-bot", resource="http://127.0.0.1:9/elsewhere"),
        "audience does not include",
    ),
    "token-for-the-api": (
        lambda p, h: p.token("support-bot", resource=h.api_url),
        "audience does not include",
    ),
    "wrong-issuer": (
        lambda p, h: p.token("support-bot", resource=_resource(h), issuer=p.other_issuer),
        "was not issued by",
    ),
    "alg-none": (
        lambda p, h: unsigned(p.token("support-bot", resource=_resource(h))),
        "algorithm is not one of",
    ),
    "hs256-forged-with-the-public-key": (
        lambda p, h: hs256_with_public_key(p.token("support-bot", resource=_resource(h)), p),
        "algorithm is not one of",
    ),
    "claims-edited-after-signing": (
        lambda p, h: tampered(p.token("support-bot", resource=_resource(h))),
        "signature does not verify",
    ),
    "no-role-claim": (
        lambda p, h: p.token("no-role", resource=_resource(h)),
        "no usable draftgate_role claim",
    ),
    "agent-acting-for-nobody": (
        lambda p, h: p.token("agent-for-nobody", resource=_resource(h)),
        "no usable draftgate_on_behalf_of claim",
    ),
    "approver-at-the-agents-door": (
        lambda p, h: p.token("alice-sso", resource=_resource(h)),
        "role approver are not accepted here",
    ),
}


def _assert_refused_and_audited(host, token: str, words: str, *, status: int = 401) -> None:
    before = last_event_id(host.runtime)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    response = httpx.post(host.mcp_url, json=LIST_TOOLS, headers=headers, timeout=10)
    assert response.status_code == status, response.text
    challenge = response.headers["www-authenticate"]
    expected_error = "invalid_token" if status == 401 else "insufficient_scope"
    assert f'error="{expected_error}"' in challenge
    assert 'resource_metadata="' in challenge
    assert words in response.json()["message"]
    assert token not in response.text
    events = events_after(host.runtime, before)
    assert [(e.type, e.actor, e.data["door"]) for e in events] == [
        ("auth.refused", "anonymous", "mcp")
    ]
    assert words in events[0].data["reason"]
    assert len(events[0].data["token_sha256_prefix"]) == 12
    stored = stored_audit_text(host.runtime)
    assert token not in stored
    signature = token.rsplit(".", 1)[1]
    assert not signature or signature not in stored  # nor its signature alone


@pytest.mark.parametrize("kind", list(REFUSED))
async def test_a_bad_token_is_refused_and_audited_with_the_check_it_failed(
    oauth_host, provider, demo, kind
):
    make, words = REFUSED[kind]
    _assert_refused_and_audited(oauth_host, make(provider, oauth_host), words)


async def test_a_token_without_the_required_scope_is_refused_as_insufficient_scope(
    oauth_host, provider, demo
):
    token = provider.token("support-bot", resource=oauth_host.mcp_url, scope="other")
    _assert_refused_and_audited(oauth_host, token, "lacks the scope draftgate", status=403)


async def test_an_expired_token_is_refused_and_audited(oauth_host, provider, demo):
    token = provider.token("short-lived", resource=oauth_host.mcp_url)
    skew = oauth_host.runtime.settings.oidc_clock_skew_seconds
    # Wait for the clock, not for a guessed duration: past exp plus the allowed skew.
    while time.time() < claims_of(token)["exp"] + skew + 1:
        time.sleep(0.1)
    _assert_refused_and_audited(oauth_host, token, "has expired")


async def test_after_a_key_rotation_new_tokens_work_and_old_ones_are_refused(
    oauth_host, provider, demo
):
    old = provider.token("support-bot", resource=oauth_host.mcp_url)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {old}"}
    assert httpx.post(oauth_host.mcp_url, json=LIST_TOOLS, headers=headers).status_code == 200
    provider.rotate()
    new = provider.token("support-bot", resource=oauth_host.mcp_url)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {new}"}
    # The new key id is unknown to draftgate's cache: it fetches the JWKS again.
    assert httpx.post(oauth_host.mcp_url, json=LIST_TOOLS, headers=headers).status_code == 200
    _assert_refused_and_audited(oauth_host, old, "key the provider does not publish")
