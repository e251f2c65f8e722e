"""Signing secrets: made per endpoint, shown once, kept sealed so that only draftgate can sign.

A secret is ``whsec_`` + base64 of 32 random bytes (the Standard Webhooks form). It must be
stored in a form the worker can sign with, so it cannot be hashed like a bearer token;
instead it is sealed with AES-256-GCM under a key derived from the server's secret key file
(``DRAFTGATE_SECRET_KEY_FILE``, the one that signs page cursors) by HMAC-SHA256 with a label
of its own. The endpoint's id and tenant are the associated data, so a sealed secret copied
onto another endpoint row does not open. Someone holding only the database (a dump, a
backup, a read replica) can neither sign deliveries nor read the secrets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from service.cursors import load_or_create_secret

SECRET_PREFIX = "whsec_"  # noqa: S105 - the Standard Webhooks prefix, not a secret
SECRET_BYTES = 32
SEAL_VERSION = "v1"
_KEY_LABEL = b"draftgate.webhooks.secret-seal.v1"
_NONCE_BYTES = 12


class SealBroken(ValueError):
    """A sealed secret that does not open: the server secret key changed, or the row was edited."""


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def sealing_key(secret_key_file: Path) -> bytes:
    """The AES key for sealed webhook secrets, derived from the server secret (never stored)."""
    return hmac.new(load_or_create_secret(secret_key_file), _KEY_LABEL, hashlib.sha256).digest()


def seal(secret: str, *, key: bytes, tenant: str, endpoint_id: str) -> str:
    nonce = secrets.token_bytes(_NONCE_BYTES)
    sealed = AESGCM(key).encrypt(nonce, secret.encode(), _bound_to(tenant, endpoint_id))
    return f"{SEAL_VERSION}.{base64.urlsafe_b64encode(nonce + sealed).decode().rstrip('=')}"


def unseal(sealed: str, *, key: bytes, tenant: str, endpoint_id: str) -> str:
    version, _, body = sealed.partition(".")
    if version != SEAL_VERSION:
        raise SealBroken(f"unknown seal version {version[:8]!r}")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        opened = AESGCM(key).decrypt(
            raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _bound_to(tenant, endpoint_id)
        )
    except (InvalidTag, ValueError):
        raise SealBroken("the secret does not open with this server's secret key") from None
    return opened.decode()


def _bound_to(tenant: str, endpoint_id: str) -> bytes:
    return f"draftgate.webhook\n{tenant}\n{endpoint_id}".encode()
