"""Private key files: PKCS#8 PEM, mode 0600, encrypted with a passphrase when one is given."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.signing import (
    PassphraseNeeded,
    WrongPassphrase,
    generate_private_key,
    is_encrypted,
    load_private_key,
    public_key_b64,
    write_private_key,
)

PASSPHRASE = "correct horse battery staple ✓".encode()


def test_a_key_written_with_a_passphrase_is_encrypted_pkcs8_and_loads_with_it(tmp_path):
    key = generate_private_key()
    path = tmp_path / "alice.pem"
    previous = os.umask(0)  # a permissive umask: the mode must not depend on it
    try:
        write_private_key(key, path, passphrase=PASSPHRASE)
    finally:
        os.umask(previous)

    pem = path.read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert is_encrypted(path)
    # a standard encrypted PKCS#8 file: any PKCS#8 reader opens it with the passphrase
    standard = serialization.load_pem_private_key(pem, password=PASSPHRASE)
    assert isinstance(standard, Ed25519PrivateKey)
    assert public_key_b64(load_private_key(path, passphrase=PASSPHRASE)) == public_key_b64(key)


def test_an_encrypted_key_without_a_passphrase_asks_for_one(tmp_path):
    path = tmp_path / "alice.pem"
    write_private_key(generate_private_key(), path, passphrase=PASSPHRASE)

    with pytest.raises(PassphraseNeeded) as needed:
        load_private_key(path)

    assert needed.value.path == path
    assert "passphrase" in str(needed.value)


@pytest.mark.parametrize("wrong", [b"correct horse battery stapl", b"x", PASSPHRASE + b" "])
def test_a_wrong_passphrase_is_refused_and_not_echoed(tmp_path, wrong):
    path = tmp_path / "alice.pem"
    write_private_key(generate_private_key(), path, passphrase=PASSPHRASE)

    with pytest.raises(WrongPassphrase) as refused:
        load_private_key(path, passphrase=wrong)

    assert str(path) in str(refused.value)
    assert wrong.decode() not in str(refused.value)
    assert isinstance(refused.value, ValueError)  # callers that catch ValueError still do


def test_a_plain_key_loads_with_or_without_a_passphrase(tmp_path):
    key = generate_private_key()
    path = tmp_path / "demo.pem"
    write_private_key(key, path)

    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    assert not is_encrypted(path)
    assert public_key_b64(load_private_key(path)) == public_key_b64(key)
    assert public_key_b64(load_private_key(path, passphrase=PASSPHRASE)) == public_key_b64(key)


def test_what_is_not_a_key_is_still_a_plain_value_error(tmp_path):
    path = tmp_path / "not-a-key.pem"
    path.write_text("hello")
    with pytest.raises(ValueError, match="PEM") as refused:
        load_private_key(path, passphrase=PASSPHRASE)
    assert not isinstance(refused.value, (PassphraseNeeded, WrongPassphrase))
