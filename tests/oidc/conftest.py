"""A real OpenID provider per test process, and draftgate's two doors configured for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from service.runtime import Runtime, build_runtime
from tests.oidc.provider_process import OidcProvider, oidc_settings, start_provider
from tests.support.databases import fresh_demo, sqlite_copy
from tests.support.servers import serve


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
    from mcp_adapter.server import create_http_app
    from service.api.app import create_app

    root = tmp_path_factory.mktemp("oauth-host")
    database = sqlite_copy(sqlite_template, root / "draftgate.db")
    settings = oidc_settings(root, database, provider.issuer)
    runtime = build_runtime(settings)
    mcp_port, api_port = (
        urlsplit(settings.mcp_public_url).port,
        urlsplit(settings.api_public_url).port,
    )
    with ExitStack() as servers:
        servers.enter_context(serve(create_http_app(runtime), port=mcp_port))
        app = create_app(runtime, publisher=lambda task, args: None)
        servers.enter_context(serve(app, port=api_port))
        yield OAuthHost(runtime, settings.mcp_public_url, settings.api_public_url)
    runtime.engine.dispose()


@pytest.fixture
def demo(oauth_host: OAuthHost) -> dict[str, Any]:
    """The module's database emptied and the demo seeded again."""
    return fresh_demo(oauth_host.runtime, api_url=oauth_host.api_url, mcp_url=oauth_host.mcp_url)
