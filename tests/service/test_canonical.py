"""RFC 8785 (JCS) canonical JSON and the params digest built on it."""

from __future__ import annotations

import hashlib
import json

import pytest

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
