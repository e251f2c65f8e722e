"""Text a human will read: what counts as unsafe, and how to show any string inertly.

An agent writes strings an approver reads. A character in the categories below can hide or
fake what is on a screen (terminal escapes, bidi overrides, invisible joiners), so inputs
refuse them (``service.validation.SafeText``) and every renderer shows them escaped
(``inert``), as defence in depth for text that came in some other way. Free text may hold
line feeds and tabs (DESIGN.md §3): a one-line renderer shows them escaped too (``inert``);
a multi-line one shows the lines framed (``inert_lines``) so none can imitate its own.

Beyond those categories, two things hide text too: Unicode's default-ignorable code points
(drawn as nothing: Hangul fillers, the combining grapheme joiner, variation selectors, tag
characters) and long runs of combining marks on one base (drawn over the neighbouring rows).
Both are unsafe, with one exception so emoji keep working: the text/emoji presentation
selectors U+FE0E and U+FE0F, once, right after a character that is itself shown.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from collections.abc import Iterator

# Controls (ANSI escapes, carriage returns), format characters (bidi overrides and isolates,
# zero-width joiners, BOM), surrogates (never valid text), private-use glyphs, and the
# line/paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

# Default_Ignorable_Code_Point, DerivedCoreProperties.txt (Unicode 15.1; stable since 5.2
# apart from new assignments inside these ranges). Inclusive (first, last) pairs, sorted.
DEFAULT_IGNORABLE: tuple[tuple[int, int], ...] = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG / JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ / AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS, VOWEL SEPARATOR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE .. RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # WORD JOINER .. invisible operators, bidi isolates, deprecated
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTORS 1-16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE (BOM)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # unassigned, reserved as ignorable
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT CONTROLS
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM .. END PHRASE
    (0xE0000, 0xE0FFF),  # tags, VARIATION SELECTORS 17-256, reserved
)
_STARTS = tuple(first for first, _last in DEFAULT_IGNORABLE)
PRESENTATION_SELECTORS = frozenset({"\ufe0e", "\ufe0f"})  # text / emoji style
COMBINING_CATEGORIES = frozenset({"Mn", "Me"})
MAX_COMBINING_RUN = 3  # enough for any real language's stacked diacritics
# What free text may hold beyond printable characters: notes, reasons, mail bodies, file
# contents and code are multi-line. Safety is the renderers' (inert_lines).
LINE_WHITESPACE = frozenset({"\n", "\t"})
TAB_AS = "    "


def is_default_ignorable(character: str) -> bool:
    code = ord(character)
    index = bisect_right(_STARTS, code) - 1
    return index >= 0 and code <= DEFAULT_IGNORABLE[index][1]


def is_unsafe(character: str) -> bool:
    """Unsafe whatever surrounds it (a presentation selector is judged in context by
    ``first_unsafe`` and ``inert``; here it counts as unsafe)."""
    return unicodedata.category(character) in UNSAFE_CATEGORIES or is_default_ignorable(character)


def _unsafe_positions(value: str, *, multiline: bool = False) -> Iterator[int]:
    """The index of every character that is unsafe where it stands (``multiline``: LF and
    TAB are text, as in free text; DESIGN.md §3)."""
    run = 0  # combining marks on the current base
    shown_before = False  # the previous character is one that is drawn by itself
    for index, character in enumerate(value):
        if character in PRESENTATION_SELECTORS and shown_before:
            shown_before = False  # one selector per character
            continue
        if multiline and character in LINE_WHITESPACE:
            run, shown_before = 0, False
            continue
        if is_unsafe(character):
            run, shown_before = 0, False
            yield index
            continue
        if unicodedata.category(character) in COMBINING_CATEGORIES:
            run += 1
            if run > MAX_COMBINING_RUN:
                yield index
            continue
        run, shown_before = 0, not character.isspace()


def first_unsafe(value: str, *, multiline: bool = False) -> str | None:
    """The first unsafe character, described (``U+202E (RIGHT-TO-LEFT OVERRIDE)``), or None.
    ``multiline``: line feeds and tabs are allowed (free text)."""
    for index in _unsafe_positions(value, multiline=multiline):
        character = value[index]
        if unicodedata.category(character) in COMBINING_CATEGORIES and not is_unsafe(character):
            return f"more than {MAX_COMBINING_RUN} combining marks on one character"
        name = unicodedata.name(character, "a control character")
        return f"U+{ord(character):04X} ({name})"
    return None


def inert(value: str) -> str:
    """``value`` with every unsafe character shown as a visible escape (``\\u202e``).

    Printable text, any script, is left as it is; the result is always valid UTF-8."""
    unsafe = set(_unsafe_positions(value))
    if not unsafe:
        return value
    return "".join(_escaped(c) if index in unsafe else c for index, c in enumerate(value))


def inert_lines(value: str) -> list[str]:
    """``value`` as the lines a multi-line renderer shows: split at each line feed, tabs as
    four spaces, every other unsafe character a visible escape (as ``inert``). A renderer
    must show them so that no line can pass for one of its own: a framed block in HTML, a
    gutter in a terminal (``service.cli.common.echo_text``)."""
    return [inert(line.replace("\t", TAB_AS)) for line in value.split("\n")]


def _escaped(character: str) -> str:
    code = ord(character)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
