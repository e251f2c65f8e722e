"""Page cursors: opaque to clients, tamper-evident, one codec for every paginated list.

A cursor is ``base64url(JSON position) "." base64url(HMAC-SHA256(key, kind, position))``.
The MAC is checked before the position is parsed, so nothing a client invents ever
reaches a parser or a query; a cursor of one list is refused by another (``kind``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from functools import cached_property
from pathlib import Path
from typing import Any

from service.errors import invalid_argument

MAC_BYTES = 16
KEY_BYTES = 32


class CursorCodec:
    """Signs and checks cursors with the server's secret key (read, or created, lazily)."""

    def __init__(self, key_file: Path, *, key: bytes | None = None) -> None:
        self._key_file = key_file
        self._given_key = key

    @cached_property
    def _key(self) -> bytes:
        return self._given_key or load_or_create_secret(self._key_file)

    def load(self) -> None:
        """Read (or create) the key now: a server fails at start-up, not on its first page."""
        _ = self._key

    def encode(self, kind: str, position: list[Any]) -> str:
        payload = json.dumps(position, separators=(",", ":")).encode()
        return f"{_b64(payload)}.{_b64(self._mac(kind, payload))}"

    def decode(self, kind: str, cursor: str) -> list[Any]:
        """The position a cursor holds, or INVALID_ARGUMENT for anything this server did not
        issue for this list."""
        payload_text, _, mac_text = cursor.partition(".")
        try:
            payload, mac = _unb64(payload_text), _unb64(mac_text)
        except (ValueError, binascii.Error):
            raise _not_ours() from None
        if not hmac.compare_digest(mac, self._mac(kind, payload)):
            raise _not_ours()
        position = json.loads(payload)
        if not isinstance(position, list):
            raise _not_ours()
        return position

    def _mac(self, kind: str, payload: bytes) -> bytes:
        message = kind.encode() + b"\n" + payload
        return hmac.new(self._key, message, hashlib.sha256).digest()[:MAC_BYTES]


def load_or_create_secret(path: Path) -> bytes:
    """The server secret in ``path`` (created 0600 with 32 random bytes when missing).

    Every process that issues or checks cursors (each API replica) must read the same file.
    """
    try:
        raw = path.read_bytes().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = secrets.token_hex(KEY_BYTES).encode()
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process created it first: use theirs
            return load_or_create_secret(path)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(created)
        raw = created
    if len(raw) < KEY_BYTES:
        raise ValueError(f"the secret key in {path} is shorter than {KEY_BYTES} bytes")
    return raw


def _not_ours() -> Exception:
    return invalid_argument("The cursor is not one this API returned for this list.")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text:
        raise ValueError("empty")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
