"""The provider's signing keys: discovered from the issuer, fetched, cached and rotated.

A token naming a key id not in the cached set makes the set be fetched again (the provider
rotated its keys), at most once per ``min_refresh_seconds``, so made-up key ids cannot turn
draftgate into a flood of requests to the provider. When the provider cannot be reached the
keys already held keep being used.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import Key, import_key

from service.oidc.config import OidcConfig, secure_url
from service.oidc.refusals import TokenRefused, refused

SIGNING_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})


class ProviderKeys:
    """The signing keys of one issuer, shared by every request of this process."""

    def __init__(self, config: OidcConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str | None, Key] = {}
        self._fetched_at = -math.inf  # the last fetch that succeeded
        self._attempted_at = -math.inf  # the last fetch tried
        self.fetches = 0  # how many times the JWKS was fetched (the rate limit is tested by it)

    def key_for(self, kid: str | None) -> Key:
        """The key a token's ``kid`` names; refetches once (rate-limited) if it is unknown."""
        with self._lock:
            if self._stale() and self._may_fetch():
                self._refresh()
            key = self._find(kid)
            if key is None and self._may_fetch():
                self._refresh()
                key = self._find(kid)
            if key is not None and self._expired():  # no fetch was allowed since: still too old
                raise refused(
                    "provider_unavailable",
                    "the OpenID provider's keys could not be fetched for too long",
                )
        if key is None:
            raise refused("unknown_key", "it is signed with a key the provider does not publish")
        return key

    def _find(self, kid: str | None) -> Key | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid) if kid is not None else None

    def _expired(self) -> bool:
        """Held past their cache time by more than ``max_stale_seconds`` (the provider has been
        unreachable that long): no longer trusted."""
        age = self._clock() - self._fetched_at
        return age > self._config.cache_seconds + self._config.max_stale_seconds

    def _stale(self) -> bool:
        return self._clock() - self._fetched_at >= self._config.cache_seconds

    def _may_fetch(self) -> bool:
        return self._clock() - self._attempted_at >= self._config.min_refresh_seconds

    def _refresh(self) -> None:
        self._attempted_at = self._clock()
        self.fetches += 1
        try:
            self._keys = self._fetch()
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as error:
            if self._expired():  # withdrawn keys must not outlive an outage of the provider
                self._keys = {}
            if not self._keys:  # nothing (left) to fall back on
                raise refused(
                    "provider_unavailable",
                    f"the OpenID provider's keys could not be fetched ({type(error).__name__})",
                ) from error
            return
        self._fetched_at = self._clock()

    def _fetch(self) -> dict[str | None, Key]:
        timeout = self._config.http_timeout_seconds
        with httpx.Client(timeout=timeout, follow_redirects=False) as http:
            discovery = _json(http, discovery_url(self._config.issuer))
            if discovery.get("issuer") != self._config.issuer:
                raise ValueError("the discovery document names another issuer")
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not secure_url(jwks_uri):
                raise ValueError("the discovery document has no https jwks_uri")
            jwks = _json(http, jwks_uri)
        return _signing_keys(jwks.get("keys"))


def discovery_url(issuer: str) -> str:
    """OpenID Connect Discovery 1.0 §4: the issuer, then /.well-known/openid-configuration."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


# A discovery document or a JWKS is a few KiB; a provider (or whoever answers for it) that
# sends more is not one.
MAX_DOCUMENT_BYTES = 1 << 20


def _json(http: httpx.Client, url: str) -> dict[str, Any]:
    with http.stream("GET", url) as response:
        response.raise_for_status()
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ValueError("the provider's document is too large")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


def _signing_keys(entries: object) -> dict[str | None, Key]:
    """The usable signing keys of a JWKS by key id; encryption keys and key types this server
    cannot use (a provider may publish them) are left out rather than failing the set."""
    if not isinstance(entries, list):
        raise ValueError("the JWKS has no keys")
    keys: dict[str | None, Key] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if entry.get("kty") not in SIGNING_KEY_TYPES:
            continue
        try:
            key = import_key(entry)
        except (JoseError, ValueError, TypeError):
            continue
        keys[entry.get("kid")] = key
    return keys


__all__ = ["ProviderKeys", "TokenRefused", "discovery_url"]
