"""RFC 8785 (JCS) canonical JSON and the digests built on it.

Everything that is hashed or signed goes through here, so that a third party
holding the same JSON value computes the same bytes.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """The JCS encoding of a JSON value (UTF-8 bytes, sorted keys, no whitespace)."""
    return rfc8785.dumps(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def params_sha256(params: dict[str, Any]) -> str:
    """The digest an approver signs over: hex SHA-256 of JCS(params)."""
    return sha256_hex(canonical_json(params))
