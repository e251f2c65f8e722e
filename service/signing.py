"""Ed25519 keys and signatures for approvals (DESIGN.md §4, §12).

Private keys live in PKCS#8 PEM files owned by the approver, encrypted with a passphrase
unless their owner chose otherwise; the server only ever stores public keys. Signatures are
base64url without padding.

Verification is strict and lives here only (``verify_bytes``): every door, the worker, the
checkpoint verifier and the passkey check call it. It is libsodium's (through PyNaCl), not
OpenSSL's: OpenSSL accepts a small-order public key such as the identity, under which a
signature with R = identity and S = 0 "verifies" for every message, so anyone could forge
an approval without a private key (docs/approvals.md, "Which keys and signatures count").
Signing and key files stay on ``cryptography``: what it signs, libsodium verifies.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from nacl.bindings import crypto_core_ed25519_is_valid_point, crypto_sign_open
from nacl.exceptions import BadSignatureError

from service.canonical import sha256_hex

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


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


WEAK_KEY_REASON = (
    "it is not the canonical encoding of a point of Ed25519's prime-order subgroup (it is "
    "a small-order point such as the identity, has a small-order component, or is encoded "
    "non-canonically); no Ed25519 key generator makes such a key, and signatures under it "
    "can be forged without any private key, or denied later"
)


class WeakPublicKey(ValueError):
    """32 bytes that are no strong Ed25519 public key (see ``strong_public_key``)."""

    def __init__(self) -> None:
        super().__init__(WEAK_KEY_REASON)


def strong_public_key(raw: bytes) -> bytes:
    """``raw`` if it is a strong Ed25519 public key: the canonical encoding of a point of the
    prime-order subgroup other than the identity (libsodium's
    ``crypto_core_ed25519_is_valid_point``: canonical, on the curve, in the main subgroup,
    not of small order). Raises WeakPublicKey, or ValueError for a length that is not 32."""
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError("an Ed25519 public key is 32 bytes")
    if not crypto_core_ed25519_is_valid_point(raw):
        raise WeakPublicKey()
    return raw


def parse_public_key(public_key: str) -> bytes:
    """The raw bytes of a base64url public key, only if it is a strong Ed25519 key; raises
    WeakPublicKey (a ValueError) for a weak one, ValueError for anything else."""
    return strong_public_key(b64url_decode(public_key))


def sign(key: Ed25519PrivateKey, message: bytes) -> str:
    return b64url(key.sign(message))


def verify(public_key: str, message: bytes, signature: str) -> bool:
    """True only for a valid signature by that key over exactly those bytes (both base64url);
    strict as ``verify_bytes``."""
    try:
        raw_key, raw_signature = b64url_decode(public_key), b64url_decode(signature)
    except ValueError:
        return False
    return verify_bytes(raw_key, message, raw_signature)


def verify_bytes(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """draftgate's one Ed25519 verification: True only when ``public_key`` is strong (see
    ``strong_public_key``) and ``signature`` is a strict RFC 8032 signature over ``message``.

    libsodium's ``crypto_sign_verify_detached`` (through ``crypto_sign_open``) rejects a
    non-canonical S (S >= L), a small-order R, a small-order or non-canonical A, and compares
    the recomputed R with the signature's bytes, so a non-canonical R never verifies; the
    equation is the cofactorless [S]B = R + [k]A. The key check before it also refuses keys
    with a small-order component, which libsodium's verify alone would accept.
    """
    try:
        strong_public_key(public_key)
    except ValueError:
        return False
    if len(signature) != SIGNATURE_BYTES:
        return False
    try:
        crypto_sign_open(signature + message, public_key)
    except BadSignatureError:
        return False
    return True
