"""The offline verifier's field-type checks, one wrong JSON type per field.

``offline._shape_problem`` tests exact types (``json.loads`` makes nothing else): a boolean
is not a seq, a float is not one either, an object is not an id.
"""

from __future__ import annotations

import json

import pytest

from service.audit.offline import FIELDS, ExportError, verify_export
from tests.service.audit.test_offline import chain, lines_of

WRONG = {
    "seq": [True, 2.0, "2", None, [2]],
    "at": [None, 1, {"at": "2026"}],
    "tenant": [None, 7, ["acme"]],
    "actor": [False, 1.5],
    "type": [None, {}],
    "draft_id": [3, True, ["dft"]],
    "execution_id": [0, {}],
    "trace_id": [1.0, False],
    "data": [None, [], "{}", 1],
    "prev_hash": [None, 0],
    "hash": [None, True],
}


def test_every_field_has_wrong_values_listed():
    assert WRONG.keys() == FIELDS.keys()


@pytest.mark.parametrize(
    ("name", "value"),
    [pytest.param(name, value, id=f"{name}={value!r}") for name in WRONG for value in WRONG[name]],
)
def test_a_field_of_the_wrong_json_type_is_refused_naming_it(name, value):
    events = chain("acme", 3)
    events[1][name] = value
    with pytest.raises(ExportError, match=f"line 2 is not an audit event: {name} has the wrong"):
        verify_export(lines_of(events))


def test_an_ascii_escaped_export_with_null_ids_and_nested_data_verifies():
    events = chain("acme", 3)
    assert all(event["execution_id"] is None for event in events)
    assert verify_export([json.dumps(event) + "\n" for event in events]).ok is True
