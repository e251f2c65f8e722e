"""Without an OpenID provider configured (the default), both doors still describe themselves
as protected resources, say there is no authorization server a client could use, and tell a
caller without a token to use a draftgate token. Needs no Node: nothing here talks OAuth."""

from __future__ import annotations

import httpx
import pytest

from harness.servers import serve
from mcp_adapter.server import create_http_app
from service.api.app import create_app
from service.config import Settings
from service.oidc.config import OidcConfigError, oidc_config

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


def test_the_mcp_metadata_names_no_authorization_server_and_the_401_says_what_to_use(runtime):
    resource = runtime.settings.mcp_public_url
    with serve(create_http_app(runtime)) as base:
        response = httpx.post(base + "/mcp", json=LIST_TOOLS, headers=MCP_HEADERS)
        documents = [
            httpx.get(base + path).json()
            for path in (
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource",
            )
        ]
        bad = httpx.post(
            base + "/mcp", json=LIST_TOOLS, headers={**MCP_HEADERS, "Authorization": "Bearer x.y.z"}
        )
    assert response.status_code == 401
    metadata_url = resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    assert response.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'
    assert "draftgate token" in response.json()["suggested_action"]
    assert "OAuth" not in response.json()["suggested_action"]
    assert (
        documents[0]
        == documents[1]
        == {
            "resource": resource,
            "bearer_methods_supported": ["header"],
            "resource_name": "draftgate MCP server",
        }
    )
    # A JWT-shaped token is just an unknown token here: no provider to ask.
    assert bad.status_code == 401
    assert bad.headers["www-authenticate"].startswith('Bearer error="invalid_token", ')
    assert bad.json()["message"] == "The bearer token is not recognised."


def test_the_api_metadata_names_no_authorization_server(runtime):
    with serve(create_app(runtime, publisher=lambda task, args: None)) as base:
        metadata = httpx.get(base + "/.well-known/oauth-protected-resource").json()
        refused = httpx.get(base + "/v1/drafts", headers={"Authorization": "Bearer dg_unknown"})
    assert metadata == {
        "resource": runtime.settings.api_public_url,
        "bearer_methods_supported": ["header"],
        "resource_name": "draftgate HTTP API",
    }
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == (
        'Bearer error="invalid_token", resource_metadata='
        f'"{runtime.settings.api_public_url}/.well-known/oauth-protected-resource"'
    )


@pytest.mark.parametrize(
    "algorithms",
    [["none"], ["HS256"], ["RS256", "HS512"], []],
    ids=["none", "hs256", "mixed", "empty"],
)
def test_symmetric_or_no_algorithms_cannot_be_configured(tmp_path, algorithms):
    settings = Settings(
        state_dir=tmp_path, oidc_issuer="https://idp.example", oidc_algorithms=algorithms
    )
    with pytest.raises(OidcConfigError, match="asymmetric algorithms only"):
        oidc_config(settings)


def test_resource_server_mode_is_off_without_an_issuer(tmp_path):
    assert oidc_config(Settings(state_dir=tmp_path)) is None
