"""service.text: what text an approver reads may not contain (it could hide or fake what is
on the screen), and how anything else is shown inertly."""

from __future__ import annotations

import itertools
import unicodedata

import pytest
from pydantic import BaseModel, ValidationError

from service.text import DEFAULT_IGNORABLE, first_unsafe, inert, inert_lines
from service.validation import SafeLine, SafeText, SignedText


class Note(BaseModel):
    text: SafeText


@pytest.mark.parametrize(
    "hidden",
    [
        "\u3164",  # HANGUL FILLER: a letter, drawn as nothing
        "\u115f",  # HANGUL CHOSEONG FILLER
        "\u1160",  # HANGUL JUNGSEONG FILLER
        "\uffa0",  # HALFWIDTH HANGUL FILLER
        "\u034f",  # COMBINING GRAPHEME JOINER
        "\u180b",  # MONGOLIAN FREE VARIATION SELECTOR ONE
        "\ufe01",  # VARIATION SELECTOR-2
        "\U000e0100",  # VARIATION SELECTOR-17: "variation selector smuggling"
        "\U000e0041",  # TAG LATIN CAPITAL LETTER A
        "\u00ad",  # SOFT HYPHEN
    ],
)
def test_default_ignorable_characters_are_unsafe(hidden):
    text = f"refund 10{hidden} USD"

    assert first_unsafe(text) == f"U+{ord(hidden):04X} ({unicodedata.name(hidden)})"
    assert hidden not in inert(text)
    with pytest.raises(ValidationError):
        Note(text=text)


def test_a_pile_of_combining_marks_is_unsafe_but_real_diacritics_are_not():
    overlay = "a" + "\u0336" * 150  # strikes through the rows around it

    assert first_unsafe(overlay) == "more than 3 combining marks on one character"
    assert inert(overlay) == "a" + "\u0336" * 3 + "\\u0336" * 147
    # Vietnamese, Hindi, decomposed accents: up to three marks on one base are text.
    for text in ("Nguyễn", "नमस्ते", "e\u0301\u0302\u0303", "Ö\u0308 then \u0301\u0301"):
        assert first_unsafe(text) is None, text
        assert Note(text=text).text


def test_emoji_presentation_selectors_are_kept_after_a_character_only():
    for text in ("👍️", "❤️ thanks", "#️⃣", "☺︎"):
        assert first_unsafe(text) is None, text
        assert inert(text) == text

    for text in ("\ufe0f", "x \ufe0f", "❤\ufe0f\ufe0f", "\u3164\ufe0f"):
        assert first_unsafe(text) is not None, text
        with pytest.raises(ValidationError):
            Note(text=text)


def test_the_ranges_are_sorted_and_disjoint():
    # The lookup bisects them: out of order, a character would be judged by the wrong range.
    for (_first, last), (following, _end) in itertools.pairwise(DEFAULT_IGNORABLE):
        assert last < following
    assert all(first <= last for first, last in DEFAULT_IGNORABLE)


def test_an_astral_character_is_escaped_with_all_its_digits():
    assert inert("a\U000e0100b") == "a\\U000e0100b"


class _Free(BaseModel):
    note: SafeText


class _Line(BaseModel):
    name: SafeLine


class _Signed(BaseModel):
    reason: SignedText


def test_free_text_keeps_line_feeds_and_tabs_and_makes_crlf_a_line_feed():
    """DESIGN.md §3 (round 3): notes, reasons and code are multi-line."""
    assert _Free(note="first\n\tsecond").note == "first\n\tsecond"
    assert _Free(note="windows\r\nline").note == "windows\nline"
    assert first_unsafe("a\nb", multiline=True) is None
    assert first_unsafe("a\nb") == "U+000A (a control character)"


@pytest.mark.parametrize(
    "hostile", ["a\rb", "a\x1b[8mb", "a\u202eb", "a\u2028b", "a\x0bb", "a\x0cb", "a\x85b"]
)
def test_free_text_still_refuses_every_other_control_and_separator(hostile):
    with pytest.raises(ValidationError):
        _Free(note=hostile)
    with pytest.raises(ValidationError):
        _Signed(reason=hostile)


def test_a_single_line_field_refuses_line_feeds_and_tabs():
    for broken in ("Ada\nLovelace", "Ada\tLovelace", "Ada\r\nLovelace"):
        with pytest.raises(ValidationError) as refused:
            _Line(name=broken)
        assert "one line" in str(refused.value)


def test_signed_text_keeps_line_feeds_but_never_rewrites_what_was_signed():
    assert _Signed(reason="no\nnot this week").reason == "no\nnot this week"
    with pytest.raises(ValidationError):
        _Signed(reason="windows\r\nline")  # a signed CR cannot be rewritten to LF


def test_a_multi_line_renderer_gets_inert_lines():
    assert inert_lines("ok\nAmount: 0.01 USD\u202e\n\tx") == [
        "ok",
        "Amount: 0.01 USD\\u202e",
        "    x",
    ]
    assert inert("ok\nAmount") == "ok\\u000aAmount"  # a one-line renderer escapes it
