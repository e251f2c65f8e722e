"""The provider's signing keys as draftgate caches them: rotation is followed, and made-up
key ids cannot make draftgate fetch the JWKS more than once per ``min_refresh_seconds``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.oidc.config import oidc_config
from service.oidc.keys import ProviderKeys
from service.oidc.refusals import TokenRefused
from service.oidc.tokens import verified_claims
from tests.oidc.provider_process import OidcProvider, oidc_settings
from tests.oidc.refusals import header_of

RESOURCE = "http://127.0.0.1:9/mcp"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _keys(tmp_path, provider: OidcProvider, clock: Clock, **overrides) -> ProviderKeys:
    config = oidc_config(oidc_settings(tmp_path, "sqlite://", provider.issuer, **overrides))
    assert config is not None
    return ProviderKeys(config, clock=clock)


def test_made_up_key_ids_fetch_the_jwks_at_most_once_per_interval(tmp_path, provider):
    clock = Clock()
    keys = _keys(tmp_path, provider, clock, oidc_jwks_min_refresh_seconds=30)
    kid = header_of(provider.token("support-bot", resource=RESOURCE))["kid"]
    keys.key_for(kid)
    assert keys.fetches == 1
    for number in range(20):
        with pytest.raises(TokenRefused) as refused:
            keys.key_for(f"made-up-{number}")
        assert refused.value.check == "unknown_key"
    assert keys.fetches == 1  # the first fetch was just now: no refetch yet
    clock.now += 31
    with pytest.raises(TokenRefused):
        keys.key_for("made-up-again")
    assert keys.fetches == 2  # one refetch once the interval passed
    assert keys.key_for(kid) is not None  # the known key needs no fetch
    assert keys.fetches == 2


def test_a_rotated_key_is_fetched_when_a_token_names_it(tmp_path, provider):
    clock = Clock()
    keys = _keys(tmp_path, provider, clock, oidc_jwks_min_refresh_seconds=30)
    config = keys._config
    before = provider.token("support-bot", resource=RESOURCE)
    assert verified_claims(config, keys, before, audience=RESOURCE)["sub"] == "support-bot"
    provider.rotate()
    after = provider.token("support-bot", resource=RESOURCE)
    clock.now += 31
    assert verified_claims(config, keys, after, audience=RESOURCE)["sub"] == "support-bot"
    assert keys.fetches == 2
    with pytest.raises(TokenRefused) as refused:
        verified_claims(config, keys, before, audience=RESOURCE)
    assert refused.value.check == "unknown_key"


def test_the_cached_keys_serve_while_the_provider_is_unreachable(tmp_path, provider):
    clock = Clock()
    keys = _keys(tmp_path, provider, clock, oidc_jwks_cache_seconds=60)
    token = provider.token("support-bot", resource=RESOURCE)
    kid = header_of(token)["kid"]
    keys.key_for(kid)
    keys._config = replace(keys._config, issuer="http://127.0.0.1:9")
    clock.now += 120  # the cache is stale, the refetch fails: the keys held still verify
    assert keys.key_for(kid) is not None
    assert keys.fetches == 2


def test_held_keys_stop_verifying_once_the_provider_is_away_too_long(tmp_path, provider):
    clock = Clock()
    keys = _keys(
        tmp_path, provider, clock, oidc_jwks_cache_seconds=60, oidc_jwks_max_stale_seconds=600
    )
    token = provider.token("support-bot", resource=RESOURCE)
    kid = header_of(token)["kid"]
    keys.key_for(kid)
    keys._config = replace(keys._config, issuer="http://127.0.0.1:9")
    clock.now += 60 + 590  # stale, the provider away, still within the bound
    assert keys.key_for(kid) is not None
    clock.now += 20  # past it: the refetch fails and the held keys are no longer trusted
    with pytest.raises(TokenRefused) as refused:
        keys.key_for(kid)
    assert refused.value.check == "provider_unavailable"
