"""Shared pieces of the fuzzing proofs (test_fuzz_api.py, test_fuzz_mcp.py).

CI runs a bounded version; ``DRAFTGATE_FUZZ_SCALE=N`` multiplies every budget by N (and the
tests' timeouts with it), e.g.::

    DRAFTGATE_FUZZ_SCALE=10 ./run test -n 0 -q -s tests/security/test_fuzz_api.py
    DRAFTGATE_FUZZ_SCALE=5 ./run test -n 0 -q -s tests/security/test_fuzz_mcp.py

Hypothesis is used as the generator; its example database is off, so a run leaves nothing
in the working tree (a failure prints the values it needs to be reproduced).
"""

from __future__ import annotations

import os
import re
import unicodedata
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st


def fuzz_scale() -> int:
    raw = os.environ.get("DRAFTGATE_FUZZ_SCALE", "1")
    try:
        scale = int(raw)
    except ValueError:
        raise pytest.UsageError(
            f"DRAFTGATE_FUZZ_SCALE must be a whole number, not {raw!r}"
        ) from None
    if scale < 1:
        raise pytest.UsageError("DRAFTGATE_FUZZ_SCALE must be at least 1")
    return scale


SCALE = fuzz_scale()


def fuzz_settings(max_examples: int, *, shrink: bool = True) -> settings:
    """Hypothesis settings for a fuzzing loop: no deadline (the machine is shared and the
    calls are real), no example database, health checks about slowness off."""
    phases = [Phase.explicit, Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.filter_too_much,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
        print_blob=True,
    )


# --- text a human must not be shown unknowingly ---------------------------------------------

# The documented contract (DESIGN.md §3, security issue §1): free text refuses controls (ANSI
# escapes, CR), format characters (bidi overrides, zero-width joiners, BOM), surrogates,
# private-use characters and the line/paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): code points a renderer
# shows as nothing at all. Those outside the categories above are listed separately: they are
# as invisible as a zero-width space.
INVISIBLE_OUTSIDE_UNSAFE_CATEGORIES = (
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER (Mn)
    (0x115F, 0x1160),  # HANGUL CHOSEONG/JUNGSEONG FILLER (Lo)
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ/AA (Mn)
    (0x180B, 0x180D),  # MONGOLIAN FREE VARIATION SELECTORS (Mn)
    (0x180F, 0x180F),  # MONGOLIAN FREE VARIATION SELECTOR FOUR (Mn)
    (0x2065, 0x2065),  # unassigned, default ignorable (Cn)
    (0x3164, 0x3164),  # HANGUL FILLER (Lo)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER (Lo)
    (0xFFF0, 0xFFF8),  # unassigned, default ignorable (Cn)
    (0xE0100, 0xE01EF),  # VARIATION SELECTORS 17-256 (Mn): "variation selector smuggling"
)


# Free text may hold line feeds and tabs (DESIGN.md §3, round 3), a CRLF arriving as LF; a
# one-line field (a name, an address part) refuses them too, which the fuzz does not hold
# against the server: such a call may be answered or refused.
LINE_WHITESPACE = frozenset({"\n", "\t"})


def is_unsafe_text(value: str) -> bool:
    """Refused in every text field: the unsafe categories, but for line feeds and tabs."""
    return any(
        unicodedata.category(character) in UNSAFE_CATEGORIES and character not in LINE_WHITESPACE
        for character in value.replace("\r\n", "\n")
    )


def invisible_characters() -> st.SearchStrategy[str]:
    return st.one_of(
        *(st.integers(low, high).map(chr) for low, high in INVISIBLE_OUTSIDE_UNSAFE_CATEGORIES)
    )


# Characters an attacker reaches for, by name, so that every run sees some of them.
ODD_CHARACTERS = [
    "\x00",  # NUL
    "\x1b",  # ESC (ANSI sequences)
    "\x1b[8m",  # conceal
    "\x1b[2J",  # clear screen
    "\x07",  # BEL
    "\x7f",  # DEL
    "\x85",  # NEXT LINE (C1)
    "\r",
    "\n",
    "\t",
    "\u00a0",  # NO-BREAK SPACE
    "\u00ad",  # SOFT HYPHEN
    "\u0301",  # COMBINING ACUTE (NFC changes e + U+0301)
    "e\u0301",
    "\u034f",  # COMBINING GRAPHEME JOINER
    "\u061c",  # ARABIC LETTER MARK
    "\u115f",  # HANGUL CHOSEONG FILLER
    "\u180e",  # MONGOLIAN VOWEL SEPARATOR
    "\u200b",  # ZERO WIDTH SPACE
    "\u200c",
    "\u200d",  # ZERO WIDTH JOINER
    "\u200e",  # LEFT-TO-RIGHT MARK
    "\u200f",
    "\u2028",  # LINE SEPARATOR
    "\u2029",
    "\u202a",
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u2060",  # WORD JOINER
    "\u2066",  # LEFT-TO-RIGHT ISOLATE
    "\u2067",
    "\u2069",
    "\u3000",  # IDEOGRAPHIC SPACE
    "\u3164",  # HANGUL FILLER
    "\ufe0f",  # VARIATION SELECTOR-16
    "\ufeff",  # BOM
    "\ufffc",
    "\ufffd",  # REPLACEMENT CHARACTER
    "\uffff",  # a noncharacter
    "\ue000",  # private use
    "\U000f0000",  # supplementary private use
    "\U000e0001",  # LANGUAGE TAG
    "\U000e0041",  # TAG LATIN CAPITAL LETTER A ("ASCII smuggling")
    "\U000e0100",  # VARIATION SELECTOR-17
    "\U0001f4e6",  # an emoji
    "\U0001d400",  # MATHEMATICAL BOLD CAPITAL A
    "\u0130",  # I WITH DOT ABOVE (case mapping grows)
    "\ufb03",  # LATIN SMALL LIGATURE FFI (NFKC changes)
    "\u0660",  # ARABIC-INDIC DIGIT ZERO (a digit, not an ASCII one)
    "\uff10",  # FULLWIDTH DIGIT ZERO
    "\uff2f\uff32\uff24",  # FULLWIDTH "ORD"
    "'",
    '"',
    "\\",
    "%00",
    "%2e%2e%2f",
    "../",
    "${jndi:x}",
    "<script>",
    "' OR 1=1 --",
]

# Any character a JSON document can carry (no lone surrogates: a client cannot encode them).
ANY_CHARACTER = st.characters(codec="utf-8")


def hostile_text(*, max_size: int = 40) -> st.SearchStrategy[str]:
    """Short strings mixing plain text, any Unicode character and the odd ones above."""
    piece = st.one_of(
        st.sampled_from(ODD_CHARACTERS),
        st.text(ANY_CHARACTER, max_size=8),
        st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12),
    )
    return st.lists(piece, max_size=max_size // 4 + 1).map("".join)


def huge_text(*, min_size: int, max_size: int) -> st.SearchStrategy[str]:
    """One long string: a repeated character or chunk, so generation stays cheap."""
    return st.builds(
        lambda chunk, size: (chunk * (size // max(1, len(chunk)) + 1))[:size],
        st.one_of(st.sampled_from(["x", "é", "\u202e", "\U0001f4e6", "ORD-1004"]), hostile_text()),
        st.integers(min_size, max_size),
    ).filter(bool)


# --- the published contract, checked independently of the product's own validation ----------


def without_nulls(value: Any) -> Any:
    """``value`` with every null member of every object dropped (null means omitted, DESIGN.md
    §3); nulls inside arrays are kept (they are refused, not dropped)."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """``pattern`` as JSON Schema means it (ECMA-262): ``$`` is the end of the string, not
    "before a final newline" as in Python's ``re``. The published patterns use no other
    construct whose meaning differs (no \\d, \\w or \\b)."""
    if not isinstance(instance, str):
        return
    anchored = (
        pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    )
    if re.search(anchored, instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
)


def schema_problems(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Why ``instance`` (nulls dropped) does not satisfy ``schema``; empty when it does."""
    validator = StrictValidator(schema)
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message[:120]}"
        for error in validator.iter_errors(without_nulls(instance))
    ]


def strings_in(value: Any) -> list[str]:
    """Every string in a JSON value, object keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *strings_in(item)]]
    if isinstance(value, list):
        return [s for item in value for s in strings_in(item)]
    return []
