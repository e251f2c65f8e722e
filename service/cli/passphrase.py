"""Passphrases of approver key files: from ``DRAFTGATE_KEY_PASSPHRASE``, else typed (hidden).

A stolen key file is in the threat model, so ``keys generate`` encrypts by default and
``approve``/``reject`` unlock an encrypted key here. The passphrase is never echoed, printed
or put in a message. Only a person at a terminal is asked: with no terminal and no variable
(a pipe, CI) the command fails instead of reading a passphrase from whatever feeds stdin.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.cli.common import fail
from service.signing import PassphraseNeeded, load_private_key

PASSPHRASE_ENV = "DRAFTGATE_KEY_PASSPHRASE"  # noqa: S105 - the variable's name, not a secret


def at_a_terminal() -> bool:
    """Whether someone can be asked: stdin is a terminal."""
    return sys.stdin.isatty()


def from_environment() -> bytes | None:
    """The passphrase in ``DRAFTGATE_KEY_PASSPHRASE``; an empty value counts as none."""
    value = os.environ.get(PASSPHRASE_ENV)
    return value.encode("utf-8") if value else None


def new_passphrase(key_file: Path) -> bytes:
    """The passphrase to encrypt a new key file with: the variable, else typed twice."""
    given = from_environment()
    if given is not None:
        return given
    if not at_a_terminal():
        fail(
            f"no passphrase to encrypt {key_file} with: set {PASSPHRASE_ENV}, run at a "
            "terminal, or pass --no-encrypt for an unencrypted key"
        )
    typed: str = typer.prompt(
        f"Passphrase for {key_file}", hide_input=True, confirmation_prompt=True, err=True
    )
    return typed.encode("utf-8")


def unlock(key_file: Path) -> Ed25519PrivateKey:
    """The private key in ``key_file``; an encrypted one's passphrase is the variable, else
    typed. Raises what ``load_private_key`` raises (WrongPassphrase, ValueError, OSError)."""
    try:
        return load_private_key(key_file)
    except PassphraseNeeded:
        pass  # encrypted: only now is a passphrase needed (a plain key asks for none)
    given = from_environment()
    if given is None:
        if not at_a_terminal():
            fail(f"{key_file} is encrypted: set {PASSPHRASE_ENV} or run at a terminal")
        typed: str = typer.prompt(f"Passphrase for {key_file}", hide_input=True, err=True)
        given = typed.encode("utf-8")
    return load_private_key(key_file, passphrase=given)
