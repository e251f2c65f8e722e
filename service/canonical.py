"""RFC 8785 (JCS) canonical JSON and the digests built on it.

Everything that is hashed or signed goes through here, so that a third party
holding the same JSON value computes the same bytes.

``rfc8785`` is the reference, in pure Python (~20-30 us for an audit event's body). For the
values draftgate hashes, the stdlib's C encoder (sorted keys, no whitespace, UTF-8 as is)
writes the same bytes several times faster; it is used only where the two provably agree:

- the value holds only exact ``dict`` (``str`` keys), ``list``, ``str``, ``bool``, ``None``
  and ``int`` within JCS's range: floats (JCS's number form is not ``repr``'s), tuples,
  subclasses (``IntEnum``, ``StrEnum``), ``Decimal`` and anything else go to ``rfc8785``;
- strings: both escape exactly ``"``, ``\\`` and U+0000-U+001F (``\\b \\f \\n \\r \\t`` by
  name, the rest as lower-case ``\\u00xx``) and write everything else, ``/``, U+007F and
  U+2028/2029 included, as UTF-8. A lone surrogate fails the UTF-8 encoding: ``rfc8785``
  then refuses it in its own words;
- key order: JCS sorts by UTF-16 code units, ``sort_keys`` by code points. They differ only
  for characters beyond U+FFFF (UTF-16 surrogate pairs sort below U+E000-U+FFFF), so an
  object with such a character in a key goes to ``rfc8785`` (in a value it is harmless).

tests/service/test_canonical.py checks the two agree, byte for byte and refusal for refusal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import rfc8785

# JCS numbers are IEEE 754 doubles: rfc8785 refuses integers beyond +-(2**53 - 1)
# (IntegerDomainError), so the fast path leaves those to it.
_SAFE_INTEGER = 2**53 - 1
# Deeper values go to rfc8785, so recursion limits (and cycles) end exactly as they do there.
_MAX_FAST_DEPTH = 64

_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    check_circular=False,  # no cycle can pass _plain's depth limit
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
)
# Up to here a character is one UTF-16 code unit (lone surrogates fail the UTF-8 encoding).
_LAST_BMP = "\uffff"


def canonical_json(value: Any) -> bytes:
    """The JCS encoding of a JSON value (UTF-8 bytes, sorted keys, no whitespace)."""
    if _plain(value, 0):
        try:
            return _ENCODER.encode(value).encode()
        except UnicodeEncodeError:  # a lone surrogate: refused below, as rfc8785 refuses it
            pass
    return rfc8785.dumps(value)


def _plain(value: Any, depth: int) -> bool:
    """Whether ``value`` holds only what the stdlib encoder writes exactly as JCS does.

    Hot (every audit append and verify step): leaves are checked inline, not per call.
    """
    kind = type(value)
    if kind is dict:
        if depth >= _MAX_FAST_DEPTH:
            return False
        for key in value:
            if type(key) is not str:
                return False
        keys = "".join(value)
        if not keys.isascii() and max(keys) > _LAST_BMP:
            return False  # code point order may not be UTF-16 order
        return _plain_items(value.values(), depth + 1)
    if kind is list:
        return depth < _MAX_FAST_DEPTH and _plain_items(value, depth + 1)
    return _plain_items((value,), depth)


def _plain_items(items: Iterable[Any], depth: int) -> bool:
    for item in items:
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is int:
            if -_SAFE_INTEGER <= item <= _SAFE_INTEGER:
                continue
            return False
        if (kind is dict or kind is list) and _plain(item, depth):
            continue
        return False
    return True


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def params_sha256(params: dict[str, Any]) -> str:
    """The digest an approver signs over: hex SHA-256 of JCS(params)."""
    return sha256_hex(canonical_json(params))
