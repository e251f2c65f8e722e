"""Which relying party passkeys belong to: the settings', by default the API's public URL
(the console is served by the API, so its origin is the console's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.config import Settings
from service.keys.assertions import RelyingParty, relying_party


@pytest.mark.parametrize(
    ("api_public_url", "expected"),
    [
        ("http://localhost:8000", RelyingParty("localhost", ("http://localhost:8000",))),
        (
            "https://drafts.example.com/api/",
            RelyingParty("drafts.example.com", ("https://drafts.example.com",)),
        ),
        # As a browser sends the origin: lower case, no default port.
        (
            "HTTPS://Drafts.Example.com:443",
            RelyingParty("drafts.example.com", ("https://drafts.example.com",)),
        ),
        ("http://localhost:80/", RelyingParty("localhost", ("http://localhost",))),
    ],
)
def test_by_default_the_relying_party_is_the_api_public_urls_host_and_origin(
    tmp_path: Path, api_public_url: str, expected: RelyingParty
):
    settings = Settings(state_dir=tmp_path, api_public_url=api_public_url)
    assert relying_party(settings) == expected


def test_explicit_settings_name_the_relying_party_and_its_origins(tmp_path: Path):
    settings = Settings(
        state_dir=tmp_path,
        api_public_url="http://127.0.0.1:8000",
        webauthn_rp_id="example.com",
        webauthn_origins=["https://console.example.com", "https://example.com"],
    )
    assert relying_party(settings) == RelyingParty(
        "example.com", ("https://console.example.com", "https://example.com")
    )
