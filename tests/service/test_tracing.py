"""Trace ids from W3C traceparent headers, or freshly generated."""

from __future__ import annotations

import re

import pytest

from service.tracing import TRACE_ID_PATTERN, new_trace_id, trace_id_from

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
VALID = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


def _is_fresh(trace_id: str) -> bool:
    return re.fullmatch(TRACE_ID_PATTERN, trace_id) is not None and trace_id != TRACE_ID


def test_valid_traceparent_gives_its_trace_id():
    assert trace_id_from(VALID) == TRACE_ID


def test_unsampled_flags_and_other_versions_are_accepted():
    assert trace_id_from(f"00-{TRACE_ID}-00f067aa0ba902b7-00") == TRACE_ID
    assert trace_id_from(f"01-{TRACE_ID}-00f067aa0ba902b7-01") == TRACE_ID


def test_surrounding_whitespace_is_tolerated():
    assert trace_id_from(f"  {VALID}\t") == TRACE_ID


@pytest.mark.parametrize(
    "header",
    [
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # version ff is forbidden
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        "garbage",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # trace id too short
        f"00-{TRACE_ID}0-00f067aa0ba902b7-01",  # trace id too long
        f"00-{TRACE_ID}-00f067aa0ba902b7",  # no flags
        f"00-{TRACE_ID[:-1]}g-00f067aa0ba902b7-01",  # not hex
        f"0-{TRACE_ID}-00f067aa0ba902b7-01",
        f"00_{TRACE_ID}_00f067aa0ba902b7_01",
        f"{VALID}\n{VALID}",
        "",
        None,
    ],
)
def test_invalid_or_missing_traceparent_gives_a_fresh_id(header):
    trace_id = trace_id_from(header)
    assert _is_fresh(trace_id)
    assert trace_id != "0" * 32


def test_fresh_ids_are_unique_32_hex():
    ids = {new_trace_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(TRACE_ID_PATTERN, trace_id) for trace_id in ids)
    assert trace_id_from("garbage") != trace_id_from("garbage")
