"""What draftgate accepts from (whoever answers for) the OpenID provider: https only (http to
loopback), bounded documents, and a malformed one refused as provider_unavailable, not a 5xx."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from service.config import Settings
from service.oidc.config import OidcConfigError, oidc_config, secure_url
from service.oidc.keys import MAX_DOCUMENT_BYTES, ProviderKeys
from service.oidc.refusals import TokenRefused


@pytest.mark.parametrize(
    ("url", "secure"),
    [
        ("https://idp.example.com/realms/shop", True),
        ("http://127.0.0.1:8080", True),
        ("http://localhost:8080/issuer", True),
        ("http://[::1]:8080", True),
        ("http://idp.example.com", False),
        ("http://127.0.0.1.evil.example", False),
        ("ftp://idp.example.com", False),
        ("https://[::1/x", False),
        ("https://", False),
    ],
)
def test_secure_url(url, secure):
    assert secure_url(url) is secure


def test_an_http_issuer_off_this_machine_is_refused_at_start(tmp_path: Path):
    settings = Settings(state_dir=tmp_path, oidc_issuer="http://idp.example.com")
    with pytest.raises(OidcConfigError, match="https"):
        oidc_config(settings)


@pytest.fixture
def provider() -> Iterator[tuple[str, dict[str, bytes]]]:
    """A loopback HTTP server answering each path with the bytes put in ``documents``."""
    documents: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = documents.get(self.path, b"{}")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    yield issuer, documents
    server.shutdown()
    server.server_close()


DISCOVERY = "/.well-known/openid-configuration"


@pytest.mark.parametrize(
    "jwks_uri",
    ["http://keys.example.com/jwks", "https://[::1/x", "https://exa\x00mple.com/jwks", 42],
)
def test_a_jwks_uri_that_is_not_https_or_not_a_url_is_provider_unavailable(
    tmp_path, provider, jwks_uri
):
    issuer, documents = provider
    documents[DISCOVERY] = json.dumps({"issuer": issuer, "jwks_uri": jwks_uri}).encode()
    config = oidc_config(Settings(state_dir=tmp_path, oidc_issuer=issuer))
    assert config is not None
    with pytest.raises(TokenRefused) as refused:
        ProviderKeys(config).key_for("any")
    assert refused.value.check == "provider_unavailable"


def test_an_oversized_document_is_provider_unavailable(tmp_path, provider):
    issuer, documents = provider
    padding = "x" * (MAX_DOCUMENT_BYTES + 1)
    documents[DISCOVERY] = json.dumps({"issuer": issuer, "padding": padding}).encode()
    config = oidc_config(Settings(state_dir=tmp_path, oidc_issuer=issuer))
    assert config is not None
    with pytest.raises(TokenRefused) as refused:
        ProviderKeys(config).key_for("any")
    assert refused.value.check == "provider_unavailable"
