"""Text a human will read: what counts as unsafe, and how to show any string inertly.

An agent writes strings an approver reads. A character in the categories below can hide or
fake what is on a screen (terminal escapes, bidi overrides, invisible joiners), so inputs
refuse them (``service.validation.SafeText``) and every renderer shows them escaped
(``inert``), as defence in depth for text that came in some other way.
"""

from __future__ import annotations

import unicodedata

# Controls (ANSI escapes, carriage returns), format characters (bidi overrides and isolates,
# zero-width joiners, BOM), surrogates (never valid text), private-use glyphs, and the
# line/paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def is_unsafe(character: str) -> bool:
    return unicodedata.category(character) in UNSAFE_CATEGORIES


def first_unsafe(value: str) -> str | None:
    """The first unsafe character, described (``U+202E (RIGHT-TO-LEFT OVERRIDE)``), or None."""
    for character in value:
        if is_unsafe(character):
            name = unicodedata.name(character, "a control character")
            return f"U+{ord(character):04X} ({name})"
    return None


def inert(value: str) -> str:
    """``value`` with every unsafe character shown as a visible escape (``\\u202e``).

    Printable text, any script, is left as it is; the result is always valid UTF-8."""
    if not any(is_unsafe(c) for c in value):
        return value
    return "".join(f"\\u{ord(c):04x}" if is_unsafe(c) else c for c in value)
