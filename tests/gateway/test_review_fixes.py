"""Fixes from the security review of the gateway: each test fails without its fix."""

from __future__ import annotations

import math
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harness.servers import serve
from service.canonical import canonical_json
from service.gateway import schema as schema_module
from service.gateway.build import _fingerprint
from service.gateway.declarations import MoneyPath, WriteContract
from service.gateway.errors import GatewayError
from service.gateway.mcp import McpTool
from service.gateway.mcp_actions import McpReadAction
from service.gateway.openapi import declaration_text
from service.gateway.results import MAX_RESULT_BYTES
from service.gateway.schema import DEFAULT_MAX_ITEMS, DEFAULT_MAX_LENGTH, strict_model
from service.gateway.upstream import UpstreamResult, UpstreamSpec
from service.gateway.where import Where
from service.registry.base import Action, WriteAction
from service.validation import StrictInput
from tests.gateway.test_http_actions import (
    actions_of,
    broken,
    execute,
    gateway_text,
    read,
    refusal,
)

SMUGGLED = "\u2028".join(
    [
        "1",
        "mcp:",
        "  - namespace: evil",
        "    transport: stdio",
        "    command: sh",
        "    tools: {}",
        "#",
    ]
)


def minimal_document(**info: Any) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Shop", "version": "1", **info},
        "servers": [{"url": "https://shop.example.com"}],
        "paths": {
            "/items/{item_id}": {
                "get": {
                    "operationId": "getItem",
                    "parameters": [
                        {"name": "item_id", "in": "path", "required": True},
                        {"name": "x", "in": "cookie\u2029mcp: []\u2029#"},
                    ],
                    "responses": {
                        "200": {
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "properties": {"name": {"type": "string"}},
                                    }
                                }
                            }
                        }
                    },
                }
            }
        },
    }


@pytest.mark.parametrize("breaker", ["\u2028", "\u2029", "\x85"])
def test_a_line_break_yaml_reads_in_a_comment_cannot_smuggle_an_upstream(breaker: str) -> None:
    text = declaration_text(
        minimal_document(version=SMUGGLED.replace("\u2028", breaker)), ["getItem"]
    )

    assert set(yaml.safe_load(text)) == {"version", "http"}
    assert not any(c in text for c in "\x85\u2028\u2029")
    assert "the 'cookie\\u2029mcp: []\\u2029#' parameter 'x' is not passed" in text


def test_the_import_refuses_a_generated_file_with_an_mcp_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from service.gateway import openapi

    monkeypatch.setattr(openapi, "_comment", lambda text: text)  # as the unfixed code did

    with pytest.raises(GatewayError, match="mcp: entry"):
        declaration_text(minimal_document(version=SMUGGLED), ["getItem"])


# --- 2, 11: an upstream's answer is recordable (RFC 8785) and bounded -----------------------------

UNHASHABLE = b'{"id": 9007199254740993, "n": NaN, "i": -Infinity, "s": "a\\ud800b", "ok": 1.5}'


def answering_app() -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def unhashable(request: Request) -> Response:
        return Response(UNHASHABLE, media_type="application/json")

    async def large(request: Request) -> Response:
        return JSONResponse({"id": "x" * (MAX_RESULT_BYTES + 10)})

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/unhashable", unhashable, methods=["GET", "POST"]),
            Route("/large", large, methods=["GET", "POST"]),
        ]
    )


@pytest.fixture(scope="module")
def answering_url() -> Iterator[str]:
    with serve(answering_app()) as base_url:
        yield base_url


def answering_actions(base_url: str) -> dict[str, Action]:
    actions: dict[str, Any] = {}
    for path in ("unhashable", "large"):
        actions[f"read_{path}"] = {
            "kind": "read",
            "description": "A read.",
            "request": {"method": "GET", "path": f"/{path}"},
            "response_fields": ["id", "n", "i", "s", "ok"],
        }
        actions[f"write_{path}"] = {
            "kind": "write",
            "description": "A write.",
            "summary": "Do it",
            "request": {"method": "POST", "path": f"/{path}"},
            "response_fields": ["id", "n", "i", "s", "ok"],
        }
    return actions_of(gateway_text({"namespace": "odd", "base_url": base_url, "actions": actions}))


def test_an_answer_rfc_8785_cannot_hash_is_recorded_and_read_as_strings(answering_url: str) -> None:
    actions = answering_actions(answering_url)

    outcome = execute(actions, "odd_write_unhashable", {}, "k:1")
    answer = read(actions, "odd_read_unhashable", {})

    expected = {"id": "9007199254740993", "n": "nan", "i": "-inf", "s": "a\\ud800b", "ok": 1.5}
    assert outcome["response"] == expected
    assert answer == expected
    canonical_json(outcome)  # what recording the outcome hashes: no longer raises


def test_an_answer_larger_than_the_recorded_bound_is_a_note_or_refused(answering_url: str) -> None:
    actions = answering_actions(answering_url)

    outcome = execute(actions, "odd_write_large", {}, "k:1")
    error = refusal(lambda: read(actions, "odd_read_large", {}))

    assert list(outcome["response"]) == ["not_kept"]
    assert f"draftgate keeps at most {MAX_RESULT_BYTES}" in outcome["response"]["not_kept"]
    assert error["code"] == "UPSTREAM_REFUSED"
    assert "larger than draftgate relays" in error["message"]


def mcp_read(mask: list[str]) -> McpReadAction:
    class NoArguments(StrictInput):
        pass

    attributes = {
        "name": "odd_look",
        "kind": "read",
        "contract_version": 1,
        "title": "Look",
        "description": "Look.",
        "Input": NoArguments,
        "upstreams": None,  # _data never calls the upstream
        "spec": UpstreamSpec(namespace="odd", transport="http", timeout_seconds=1, url="http://x"),
        "tool": "look",
        "mask": tuple(mask),
        "schema_sha256": "0" * 64,
    }
    action: McpReadAction = type("Read_odd_look", (McpReadAction,), attributes)()
    return action


def test_an_mcp_result_is_made_recordable_and_bounded() -> None:
    action = mcp_read([])
    odd = UpstreamResult(
        text="", structured={"big": 2**60, "nan": math.nan, "deep": [[[[1]]]]}, is_error=False
    )
    large = UpstreamResult(text="", structured={"x": "y" * MAX_RESULT_BYTES}, is_error=False)
    long_text = UpstreamResult(
        text="\u202e" + "t" * (2 * MAX_RESULT_BYTES), is_error=False, structured=None
    )

    data, _ = action._data(odd)
    no_data, note = action._data(large)
    _, text = action._data(long_text)

    assert data == {"big": str(2**60), "nan": "nan", "deep": [[[[1]]]]}
    canonical_json(data)
    assert no_data is None
    assert note is not None
    assert "draftgate keeps at most" in note
    assert text is not None
    assert text.startswith("\\u202e")
    assert len(text) <= MAX_RESULT_BYTES + 8


# --- 4, 9, 10: string and number bounds hold for what is sent -------------------------------------


def model_of(properties: dict[str, Any]) -> type[StrictInput]:
    return strict_model("t_tool", {"type": "object", "properties": properties}, where="t")


def test_pattern_and_length_hold_for_the_normalised_text() -> None:
    model = model_of(
        {
            "no_semicolon": {"type": "string", "pattern": "^[^;]*$"},
            "one": {"type": "string", "maxLength": 1},
        }
    )

    with pytest.raises(ValidationError, match="no_semicolon"):
        model.model_validate({"no_semicolon": "a\u037eb"})  # GREEK QUESTION MARK → ";"
    with pytest.raises(ValidationError, match="one"):
        model.model_validate({"one": "\ufb2c"})  # NFC is three code points
    assert model.model_validate({"no_semicolon": "caf\u0065\u0301"}).model_dump(
        by_alias=True, exclude_none=True
    ) == {"no_semicolon": "caf\u00e9"}


# --- 5: a read is a GET ---------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_a_read_that_is_not_a_get_is_refused_naming_the_line(method: str) -> None:
    def change(entry: dict[str, Any]) -> None:
        entry["actions"]["get_invoice"]["request"]["method"] = method

    problem = broken(change)

    assert re.search(r"gateway\.yaml:\d+: .*get_invoice", problem), problem
    assert f"a read action must be a GET request, not {method}" in problem


# --- 6: one deadline for the whole request --------------------------------------------------------


@dataclass
class Dripper:
    url: str
    thread: threading.Thread
    seen: list[str] = field(default_factory=list)  # "cut off" or "sent it all"

    def outcome(self) -> list[str]:
        self.thread.join(timeout=30)
        return self.seen


@pytest.fixture
def header_dripper() -> Iterator[Dripper]:
    """A server that sends its status line, then its headers a byte at a time: every read
    is quick, the whole answer is not (about 5 s), then a complete, valid answer. It notes
    whether the client cut it off first."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    seen: list[str] = []

    def serve_one() -> None:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            try:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\n")
                for byte in b"X-Slow: " + b"a" * 50 + b"\r\n":
                    if stop.wait(0.1):
                        return
                    connection.sendall(bytes([byte]))
                body = b'{"id": "late"}'
                connection.sendall(
                    b"Content-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                seen.append("sent it all")
            except OSError:  # the client hung up while the headers were still coming
                seen.append("cut off")

    thread = threading.Thread(target=serve_one, daemon=True)
    thread.start()
    yield Dripper(f"http://127.0.0.1:{listener.getsockname()[1]}", thread, seen)
    stop.set()
    listener.close()
    thread.join(timeout=10)


def test_headers_dripping_in_past_the_timeout_are_no_answer(header_dripper: Dripper) -> None:
    entry = {
        "namespace": "drip",
        "base_url": header_dripper.url,
        "timeout_seconds": 0.5,
        "actions": {
            "look": {
                "kind": "read",
                "description": "A read.",
                "request": {"method": "GET", "path": "/look"},
                "response_fields": ["id"],
            }
        },
    }

    error = refusal(lambda: read(actions_of(gateway_text(entry)), "drip_look", {}))

    assert (error["code"], error["retryable"]) == ("UPSTREAM_UNAVAILABLE", True)
    assert "no answer within 0.5 s" in error["message"]
    assert header_dripper.outcome() == ["cut off"]  # the call ended before the headers did


# --- 7, 8: the schema builder's budget and the root's keywords ------------------------------------


def test_refs_that_multiply_stop_at_the_node_budget_naming_where(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schema_module, "MAX_SCHEMA_NODES", 500)  # 10,000 takes seconds to reach
    definitions: dict[str, Any] = {"L12": {"type": "string"}}
    for level in range(11, -1, -1):  # 4 properties a level, 12 levels: 4^12 nodes inlined
        reference = {"$ref": f"#/$defs/L{level + 1}"}
        definitions[f"L{level}"] = {
            "type": "object",
            "properties": dict.fromkeys("abcd", reference),
        }
    schema = {"type": "object", "properties": {"top": {"$ref": "#/$defs/L0"}}, "$defs": definitions}

    with pytest.raises(GatewayError, match=r"^t: top\..*more than 500 nodes"):
        strict_model("t_tool", schema, where="t")


@pytest.mark.parametrize(
    "keyword",
    [
        {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        {"not": {"required": ["a"]}},
        {"if": {"required": ["a"]}, "then": {"required": ["b"]}},
        {"minProperties": 1},
        {"patternProperties": {"^x": {"type": "string"}}},
    ],
)
def test_the_roots_keywords_are_checked_as_every_objects(keyword: dict[str, Any]) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, **keyword}

    with pytest.raises(GatewayError, match=rf"^t: \(input\): keyword '{next(iter(keyword))}'"):
        strict_model("t_tool", schema, where="t")


def test_a_root_ref_is_resolved() -> None:
    schema = {
        "$ref": "#/$defs/Arguments",
        "$defs": {
            "Arguments": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            }
        },
    }

    model = strict_model("t_tool", schema, where="t")

    with pytest.raises(ValidationError):
        model.model_validate({})
    assert model.model_validate({"name": "x"}).model_dump(by_alias=True) == {"name": "x"}


def test_upper_bounds_are_at_most_the_defaults_and_zero_is_kept() -> None:
    model = model_of(
        {
            "empty": {"type": "string", "maxLength": 0},
            "none": {"type": "array", "items": {"type": "string"}, "maxItems": 0},
            "long": {"type": "string", "maxLength": 10**9},
            "many": {"type": "array", "items": {"type": "integer"}, "maxItems": 10**9},
        }
    )

    for arguments, named in [
        ({"empty": "x"}, "empty"),
        ({"none": ["x"]}, "none"),
        ({"long": "x" * (DEFAULT_MAX_LENGTH + 1)}, "long"),
        ({"many": [1] * (DEFAULT_MAX_ITEMS + 1)}, "many"),
    ]:
        with pytest.raises(ValidationError, match=named):
            model.model_validate(arguments)
    model.model_validate({"empty": "", "none": [], "long": "x" * DEFAULT_MAX_LENGTH})


def test_numbers_stay_within_what_the_digest_can_hash() -> None:
    model = model_of(
        {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "wide": {"type": "integer", "minimum": -(2**60), "maximum": 2**60},
        }
    )

    for arguments in [{"n": 2**53}, {"n": -(2**53)}, {"wide": 2**53}, {"x": 1e300}]:
        with pytest.raises(ValidationError):
            model.model_validate(arguments)
    for text in ['{"x": 1e400}', '{"x": NaN}']:
        with pytest.raises(ValidationError):
            model.model_validate_json(text)
    fine = {"n": 2**53 - 1, "x": -1.5, "wide": -(2**53 - 1)}
    canonical_json(model.model_validate(fine).model_dump(mode="json", by_alias=True))


# --- 12: the amount an approver reads is the amount policies judge --------------------------------

TWO_AMOUNTS = {
    "type": "object",
    "properties": {
        "amount_cents": {"type": "integer", "minimum": 1},
        "fee_cents": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "shown_currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "required": ["amount_cents", "fee_cents", "currency", "shown_currency"],
}


def contract(summary: str, money: MoneyPath | None) -> WriteContract:
    model = strict_model("t_pay", TWO_AMOUNTS, where="t")
    declaration = McpTool(kind="write", summary=summary, money=money)
    return WriteContract(declaration, model, where=Where("t"))


@pytest.mark.parametrize(
    ("summary", "money"),
    [
        (
            "Pay {fee_cents|money:currency}",
            {"amount_minor": "amount_cents", "currency": "currency"},
        ),
        (
            "Pay {amount_cents|money:shown_currency}",
            {"amount_minor": "amount_cents", "currency": "currency"},
        ),
        ("Pay {amount_cents|money:USD}", {"amount_minor": "amount_cents", "currency": "EUR"}),
        ("Pay {amount_cents|money:currency}", None),
        ("Pay {amount_cents|money:currency}", {"amount": "amount_cents", "currency": "currency"}),
    ],
)
def test_a_money_placeholder_must_show_the_declared_amount(
    summary: str, money: dict[str, str] | None
) -> None:
    with pytest.raises(GatewayError, match=r"^t:1: summary: a \|money placeholder"):
        contract(summary, None if money is None else MoneyPath(**money))


def test_the_declared_amount_in_the_summary_loads() -> None:
    for summary, money in [
        (
            "Pay {amount_cents|money:currency}",
            MoneyPath(amount_minor="amount_cents", currency="currency"),
        ),
        ("Pay {amount_cents|money:EUR}", MoneyPath(amount_minor="amount_cents", currency="EUR")),
        ("Pay {fee_cents} cents", MoneyPath(amount_minor="amount_cents", currency="currency")),
    ]:
        contract(summary, money)


# --- 13: what a write's contract covers -----------------------------------------------------------


def http_fingerprint(**service: Any) -> str:
    entry = {
        "namespace": "pay",
        "base_url": "https://pay.example.com",
        **service,
        "actions": {
            "send": {
                "kind": "write",
                "description": "Send.",
                "summary": "Send it",
                "request": {"method": "POST", "path": "/send"},
            }
        },
    }
    action = actions_of(gateway_text(entry))["pay_send"]
    assert isinstance(action, WriteAction)
    return _fingerprint(action)


def test_an_http_writes_contract_covers_its_literal_headers_and_secret_references(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAY_TOKEN", "one-value")
    monkeypatch.setenv("OTHER_TOKEN", "one-value")
    plain = http_fingerprint()
    tenant = http_fingerprint(headers={"X-Tenant": "acme"})
    other_tenant = http_fingerprint(headers={"X-Tenant": "evil"})
    token = http_fingerprint(headers={"Authorization": {"env": "PAY_TOKEN"}})
    other_token = http_fingerprint(headers={"Authorization": {"env": "OTHER_TOKEN"}})
    monkeypatch.setenv("PAY_TOKEN", "rotated-value")

    assert len({plain, tenant, other_tenant, token, other_token}) == 5
    assert http_fingerprint(headers={"Authorization": {"env": "PAY_TOKEN"}}) == token  # rotation


def test_the_import_says_base_url_came_from_the_document_and_gets_the_token() -> None:
    from_document = declaration_text(minimal_document(), ["getItem"])
    chosen = declaration_text(minimal_document(), ["getItem"], base_url="https://x.example.com")

    assert "base_url is the document's servers[0]" in from_document
    assert "the token), is sent there" in from_document
    assert "servers[0]" not in chosen
