"""Ed25519 keys and signatures for approvals (DESIGN.md §4).

Private keys live in PKCS#8 PEM files owned by the approver; the server only
ever stores public keys. Signatures are base64url without padding.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from service.canonical import sha256_hex

PUBLIC_KEY_BYTES = 32


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding; raises ValueError on anything else."""
    if "=" in text or any(c not in _B64URL_ALPHABET for c in text):
        raise ValueError("not base64url without padding")
    decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if b64url(decoded) != text:  # one spelling per value: no stray bits in the last character
        raise ValueError("not the canonical base64url spelling")
    return decoded


_B64URL_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def write_private_key(key: Ed25519PrivateKey, path: Path) -> None:
    """Write a PKCS#8 PEM file readable by its owner only (created 0600, never wider)."""
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def public_key_b64(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The raw 32-byte public key, base64url: how keys are registered and shown."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return b64url(public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def key_id_for(public_key: str) -> str:
    """A stable id derived from the public key: ``ed25519-`` + 16 hex of its SHA-256."""
    return "ed25519-" + sha256_hex(b64url_decode(public_key))[:16]


def parse_public_key(public_key: str) -> Ed25519PublicKey:
    raw = b64url_decode(public_key)
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError("an Ed25519 public key is 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def sign(key: Ed25519PrivateKey, message: bytes) -> str:
    return b64url(key.sign(message))


def verify(public_key: str, message: bytes, signature: str) -> bool:
    """True only for a valid signature by that key over exactly those bytes."""
    try:
        parse_public_key(public_key).verify(b64url_decode(signature), message)
    except (InvalidSignature, ValueError):
        return False
    return True
