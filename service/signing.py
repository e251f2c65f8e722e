"""Ed25519 keys and signatures for approvals (DESIGN.md §4).

Private keys live in PKCS#8 PEM files owned by the approver, encrypted with a passphrase
unless their owner chose otherwise; the server only ever stores public keys. Signatures are
base64url without padding.
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


class PassphraseNeeded(ValueError):
    """The key file is encrypted and no passphrase was given: ask for one and load again."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"{path} is encrypted: a passphrase is needed")
        self.path = path


class WrongPassphrase(ValueError):
    """The passphrase does not decrypt the key file (or the file is damaged)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"the passphrase does not decrypt {path} (wrong passphrase?)")
        self.path = path


def write_private_key(
    key: Ed25519PrivateKey, path: Path, *, passphrase: bytes | None = None
) -> None:
    """Write a PKCS#8 PEM file readable by its owner only (created 0600, never wider),
    encrypted with ``passphrase`` when one is given (PKCS#8 ``ENCRYPTED PRIVATE KEY``)."""
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if passphrase is None
        else serialization.BestAvailableEncryption(passphrase)
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)


def load_private_key(path: Path, *, passphrase: bytes | None = None) -> Ed25519PrivateKey:
    """The Ed25519 key in a PKCS#8 PEM file, encrypted or not.

    ``passphrase`` is used only if the file is encrypted (a plain file loads without one).
    Raises PassphraseNeeded for an encrypted file and no passphrase, WrongPassphrase when it
    does not decrypt, ValueError for anything that is not an Ed25519 private key, OSError
    when the file cannot be read.
    """
    pem = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # documented: raised (only) for an encrypted key and no password
        if passphrase is None:
            raise PassphraseNeeded(path) from None
        try:
            key = serialization.load_pem_private_key(pem, password=passphrase)
        except ValueError:
            raise WrongPassphrase(path) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} does not hold an Ed25519 private key")
    return key


def is_encrypted(path: Path) -> bool:
    """Whether the key file needs a passphrase (it is read, not decrypted)."""
    try:
        load_private_key(path)
    except PassphraseNeeded:
        return True
    return False


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
