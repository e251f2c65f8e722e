"""RFC 8785 (JCS) canonical JSON and the params digest built on it."""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from enum import IntEnum, StrEnum
from typing import Any
from unittest import mock

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from service.approvals.schemas import Decision, build_statement
from service.canonical import canonical_json, params_sha256, sha256_hex


def test_keys_are_sorted_and_whitespace_removed():
    assert canonical_json({"b": 1, "a": [1, 2, {"d": True, "c": None}]}) == (
        b'{"a":[1,2,{"c":null,"d":true}],"b":1}'
    )


def test_nested_objects_are_sorted_at_every_level():
    value = {"z": {"y": {"x": 1, "w": 2}, "a": "first"}, "m": []}
    assert canonical_json(value) == b'{"m":[],"z":{"a":"first","y":{"w":2,"x":1}}}'


def test_insertion_order_does_not_change_the_bytes():
    first = {"order_id": "ORD-1004", "amount": {"currency": "USD", "amount_minor": 2500}}
    second = {"amount": {"amount_minor": 2500, "currency": "USD"}, "order_id": "ORD-1004"}
    assert canonical_json(first) == canonical_json(second)
    assert params_sha256(first) == params_sha256(second)


def test_unicode_is_written_as_utf8_not_escaped():
    assert canonical_json({"city": "Zürich", "note": "返金"}) == (
        '{"city":"Zürich","note":"返金"}'.encode()
    )


def test_control_characters_are_escaped_in_lower_case():
    assert canonical_json('\u000f\n\t\u001f"\\/') == b'"\\u000f\\n\\t\\u001f\\"\\\\/"'


def test_rfc8785_section_3_2_2_example():
    """The worked example of RFC 8785 §3.2.2 (numbers, string escaping, literals)."""
    value = {
        "numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000f\u000aA'\u0042\u0022\u005c\\\"/",
        "literals": [None, True, False],
    }
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert canonical_json(value) == expected


def test_rfc8785_section_3_2_3_property_sorting():
    """Keys sort by UTF-16 code units (RFC 8785 §3.2.3): the emoji sorts before U+FB33."""
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    ).encode()
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    ("number", "text"),
    [(0, "0"), (-0.0, "0"), (1e21, "1e+21"), (1e-7, "1e-7"), (100.0, "100"), (2**53 - 1, None)],
)
def test_numbers_use_the_ecmascript_form(number, text):
    assert canonical_json(number) == (text or str(number)).encode()


def test_values_jcs_cannot_represent_are_refused():
    with pytest.raises(Exception, match="safe integer"):
        canonical_json(2**53)
    with pytest.raises(Exception, match="not representable"):
        canonical_json(float("nan"))
    with pytest.raises(Exception, match="keys must be strings"):
        canonical_json({1: "one"})


def test_params_sha256_is_the_hex_sha256_of_the_jcs_bytes():
    params = {
        "reason": "damaged",
        "order_id": "ORD-1004",
        "amount": {"currency": "USD", "amount_minor": 78_500},
        "note": "Kratzer am Gehäuse",
    }
    jcs = (
        '{"amount":{"amount_minor":78500,"currency":"USD"},"note":"Kratzer am Gehäuse",'
        '"order_id":"ORD-1004","reason":"damaged"}'
    ).encode()
    assert canonical_json(params) == jcs
    assert params_sha256(params) == hashlib.sha256(jcs).hexdigest()
    assert params_sha256(params) == sha256_hex(jcs)


def test_params_sha256_differs_from_a_digest_of_ordinary_json():
    # Anyone recomputing the digest must canonicalise: json.dumps gives other bytes.
    params = {"b": 1, "a": "ä"}
    assert params_sha256(params) != hashlib.sha256(json.dumps(params).encode()).hexdigest()
    assert params_sha256(params) == hashlib.sha256('{"a":"ä","b":1}'.encode()).hexdigest()


def test_sha256_hex_of_known_input():
    assert sha256_hex(b"abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )
    assert len(params_sha256({})) == 64
    assert params_sha256({}) == hashlib.sha256(b"{}").hexdigest()


# --- the fast path: byte for byte and refusal for refusal what rfc8785 does -----------------
#
# canonical_json writes the values draftgate hashes with the stdlib's C encoder and hands
# everything else to rfc8785. The reference here is rfc8785 itself, taken before any test
# patches it.

REFERENCE = rfc8785.dumps
SAFE = 2**53 - 1

# Characters where JSON encoders are known to disagree: controls, the escaped ones, "/",
# DEL, the line/paragraph separators, both ends of the BMP's private-use block (which
# UTF-16 sorts after surrogate pairs), characters beyond U+FFFF, lone surrogates.
NASTY_CHARACTERS = [
    *"\x00\x01\x07\b\t\n\x0b\f\r\x1b\x1f \"'/\\\x7f",
    *"aAz0~\u0080\u00e4\u00ff\u0100\u07ff\u0800\u2028\u2029\u20ac\ud7ff",
    *"\ue000\ufb33\ufeff\ufffd\uffff\U00010000\U0001f600\U0010ffff",
    "\ud800",
    "\udbff",
    "\udc00",
    "\udfff",
]
nasty_text = st.text(st.sampled_from(NASTY_CHARACTERS) | st.characters(), max_size=6)
boundary_integers = st.sampled_from(
    [0, 1, -1, SAFE - 1, SAFE, SAFE + 1, -SAFE, -SAFE - 1, 2**63, -(2**63), 2**64, 10**400]
)
integers = st.integers() | boundary_integers | st.integers(-SAFE, SAFE)


class Choice(IntEnum):
    ONE = 1


class Colour(StrEnum):
    RED = "red"


class Sneaky(int):
    """An int that converts to another int: rfc8785 writes int(x), the C encoder the value."""

    def __int__(self) -> int:
        return 7


class ReorderedItems(dict):  # type: ignore[type-arg]
    """A dict whose items() lies: rfc8785 copies the dict, the C encoder calls items()."""

    def items(self):  # type: ignore[no-untyped-def]
        return [("injected", True)]


class Text(str):
    pass


ODD_LEAVES = [
    Choice.ONE,
    Colour.RED,
    Sneaky(3),
    Text("text"),
    Decimal("1.5"),
    b"bytes",
    datetime(2026, 12, 1, tzinfo=UTC),
    object(),
    ReorderedItems(a=1),
    (1, "tuple"),
    (),
    {1, 2},
]

# What draftgate hashes: str keys, no floats (amounts are integers of minor units).
plain_values = st.recursive(
    st.none() | st.booleans() | integers | nasty_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(nasty_text, children),
    max_leaves=24,
)
# Anything at all, including what JCS refuses and what only rfc8785 may write.
any_values = st.recursive(
    st.none() | st.booleans() | integers | st.floats() | nasty_text | st.sampled_from(ODD_LEAVES),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(nasty_text, children, max_size=4)
        | st.dictionaries(
            st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False) | nasty_text,
            children,
            max_size=3,
        )
    ),
    max_leaves=24,
)
PROPERTY = settings(max_examples=600, deadline=None, database=None)


def outcome(encode: Callable[[Any], bytes], value: Any) -> tuple[Any, ...]:
    try:
        return ("bytes", encode(value))
    except Exception as exc:  # compared as type and message: the refusal must be the same
        return ("refused", type(exc), str(exc))


def fast_path_applies(value: Any, depth: int = 0) -> bool:
    """An independent statement of when the C encoder must be used: exact JSON types, no
    float, integers JCS can write, no lone surrogate, no key beyond U+FFFF."""
    if isinstance(value, str):
        return type(value) is str and not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if value is None or type(value) is bool:
        return True
    if type(value) is int:
        return abs(value) <= SAFE
    if type(value) is list:
        return depth < 64 and all(fast_path_applies(item, depth + 1) for item in value)
    if type(value) is dict:
        return depth < 64 and all(
            type(key) is str
            and all(ord(c) <= 0xFFFF for c in key)
            and fast_path_applies(key)
            and fast_path_applies(item, depth + 1)
            for key, item in value.items()
        )
    return False


@contextmanager
def rfc8785_unavailable() -> Iterator[None]:
    with mock.patch.object(rfc8785, "dumps", side_effect=AssertionError("fell back")):
        yield


@pytest.mark.full  # thousands of generated values, seconds
@PROPERTY
@given(plain_values)
def test_plain_values_are_written_by_the_fast_path_exactly_as_rfc8785_writes_them(value):
    expected = outcome(REFERENCE, value)
    if fast_path_applies(value):
        with rfc8785_unavailable():
            assert outcome(canonical_json, value) == expected
        assert expected[0] == "bytes"
    else:
        assert outcome(canonical_json, value) == expected


@PROPERTY
@given(any_values)
def test_any_value_gives_what_rfc8785_gives_bytes_or_refusal(value):
    assert outcome(canonical_json, value) == outcome(REFERENCE, value)


@PROPERTY
@given(st.dictionaries(nasty_text, st.integers(0, 9), min_size=2, max_size=8))
def test_keys_sort_by_utf16_code_units_whatever_their_characters(value):
    assert outcome(canonical_json, value) == outcome(REFERENCE, value)


def test_every_character_is_escaped_or_written_as_rfc8785_does():
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    with rfc8785_unavailable():
        written = canonical_json({"every character": everything})
    assert written == REFERENCE({"every character": everything})


EDGE_CASES = [
    pytest.param({"\ufb33": 1, "\U0001f600": 2}, id="private-use-vs-emoji-keys"),
    pytest.param({"\uffff": 1, "\U00010000": 2, "\ue000": 3}, id="bmp-end-vs-supplementary"),
    pytest.param({"a": {"\U0001f600": 1, "\ue000": 2}}, id="nested-mixed-keys"),
    pytest.param({"\U0001f600": 1}, id="one-emoji-key"),
    pytest.param({"note": "\U0001f600 \ue000"}, id="emoji-in-a-value"),
    pytest.param({"\ud800": 1}, id="lone-surrogate-key"),
    pytest.param({"a": "\udfff"}, id="lone-surrogate-value"),
    pytest.param("\ud83d\ude00", id="surrogate-pair-as-two-code-points"),
    pytest.param("\u2028\u2029\x7f/</script>", id="separators-del-slash"),
    pytest.param("".join(map(chr, range(0x20))), id="all-c0-controls"),
    pytest.param({"": 0, "\x00": 1, " ": 2}, id="empty-and-nul-keys"),
    pytest.param(SAFE, id="largest-safe-integer"),
    pytest.param(-SAFE, id="smallest-safe-integer"),
    pytest.param(SAFE + 1, id="2**53"),
    pytest.param(-SAFE - 1, id="-(2**53)"),
    pytest.param([2**64], id="integer-beyond-int64"),
    pytest.param(10**5000, id="integer-beyond-str-digits-limit"),
    pytest.param({"amount": 12.5}, id="float"),
    pytest.param([1.0, -0.0, 1e21, 5e-324], id="floats-js-form"),
    pytest.param(float("inf"), id="infinity"),
    pytest.param([float("nan")], id="nan"),
    pytest.param(True, id="true"),
    pytest.param({"flag": False, "n": 0}, id="false-is-not-zero"),
    pytest.param({1: "one"}, id="int-key"),
    pytest.param({True: "yes"}, id="bool-key"),
    pytest.param({None: "null"}, id="none-key"),
    pytest.param({"a": 1, 2: "b"}, id="mixed-keys"),
    pytest.param({Text("k"): 1}, id="str-subclass-key"),
    *(pytest.param(leaf, id=f"odd-{type(leaf).__name__}") for leaf in ODD_LEAVES),
    pytest.param({"choice": Choice.ONE, "colour": Colour.RED}, id="enums-in-a-dict"),
    pytest.param([[[[[[[[[[[]]]]]]]]]]], id="nested-lists"),
    pytest.param(functools.reduce(lambda inner, _: [inner], range(64), []), id="depth-64"),
    pytest.param(functools.reduce(lambda inner, _: {"k": inner}, range(65), {}), id="depth-65"),
]


@pytest.mark.parametrize("value", EDGE_CASES)
def test_edge_cases_agree_with_rfc8785(value):
    assert outcome(canonical_json, value) == outcome(REFERENCE, value)


def test_a_value_too_deep_for_rfc8785_is_refused_the_same_way():
    deep: list[Any] = []
    for _ in range(5_000):
        deep = [deep]
    assert outcome(canonical_json, deep) == outcome(REFERENCE, deep)
    assert outcome(canonical_json, deep)[1] is RecursionError


@pytest.mark.parametrize("container", [list, dict])
def test_a_value_rfc8785_can_nest_is_written_however_deep(container):
    # Half the recursion limit: rfc8785 (one frame a level) writes it; a check that took
    # two frames a level without a depth limit of its own would raise RecursionError here.
    deep: Any = container()
    for _ in range(sys.getrecursionlimit() // 2):
        deep = [deep] if container is list else {"k": deep}
    assert outcome(canonical_json, deep) == outcome(REFERENCE, deep)
    assert outcome(canonical_json, deep)[0] == "bytes"


def test_a_cycle_is_refused_the_same_way():
    cycle: list[Any] = []
    cycle.append(cycle)
    assert outcome(canonical_json, cycle) == outcome(REFERENCE, cycle)


def test_what_draftgate_hashes_never_reaches_rfc8785():
    audit_body = {
        "seq": 1_204,
        "at": "2026-12-01T10:00:00.123456Z",
        "tenant": "demo",
        "actor": "agent:support-bot",
        "type": "tool.called",
        "draft_id": "dft_0123456789abcdef",
        "execution_id": None,
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "data": {"tool": "get_order", "arguments": {"order_id": "ORD-1004"}, "latency_us": 812},
        "prev_hash": "0" * 64,
    }
    params = {"order_id": "ORD-1004", "amount": {"currency": "EUR", "amount_minor": 2500}}
    statement = build_statement(
        tenant="demo",
        draft_id="dft_0123456789abcdef",
        revision=2,
        action="shop.refund",
        contract_version=1,
        params_sha256=params_sha256(params),
        decision=Decision.APPROVE,
        approver="approver:alice",
        key_id="k_1",
        issued_at="2026-12-01T10:00:00Z",
        reason="checked the photos",
    )
    values = [audit_body, params, statement, {"note": "Kratzer am Gehäuse \U0001f600"}]
    with rfc8785_unavailable():
        written = [canonical_json(value) for value in values]
    assert written == [REFERENCE(value) for value in values]
