"""A real OpenID provider per test process, and draftgate's two doors configured for it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from harness.databases import fresh_demo, sqlite_copy
from harness.deployment import Deployment
from service.runtime import Runtime
from tests.oidc.provider_process import OidcProvider, oidc_settings, start_provider


@pytest.fixture(scope="session")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    started = start_provider(tmp_path_factory.mktemp("oidc-provider") / "provider.log")
    yield started
    started.stop()


@dataclass
class OAuthHost:
    runtime: Runtime
    mcp_url: str
    api_url: str


@pytest.fixture(scope="module")
def oauth_host(
    provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[OAuthHost]:
    root = tmp_path_factory.mktemp("oauth-host")
    database = sqlite_copy(sqlite_template, root / "draftgate.db")
    settings = oidc_settings(root, database, provider.issuer)
    # Both doors at their public URLs: the tokens' audiences name them.
    with Deployment(settings) as deployment:
        deployment.serve_mcp(port=urlsplit(settings.mcp_public_url).port)
        deployment.serve_api(
            port=urlsplit(settings.api_public_url).port, publisher=lambda task, args: None
        )
        yield OAuthHost(deployment.runtime, settings.mcp_public_url, settings.api_public_url)


@pytest.fixture
def demo(oauth_host: OAuthHost) -> dict[str, Any]:
    """The module's database emptied and the demo seeded again."""
    return fresh_demo(oauth_host.runtime, api_url=oauth_host.api_url, mcp_url=oauth_host.mcp_url)
