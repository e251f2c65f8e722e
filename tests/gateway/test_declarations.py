"""The gateway file's building blocks, without any upstream: the strict models made from
JSON Schema, summary templates, and the loader's errors with their line numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.errors import DomainError
from service.gateway.config import load_gateway_file, parse_gateway_text
from service.gateway.declarations import MoneyPath, SecretRef, WriteContract
from service.gateway.errors import GatewayError
from service.gateway.mcp import McpStdio, McpTool
from service.gateway.paths import masked as masked_paths
from service.gateway.schema import strict_model
from service.gateway.templates import parse_template
from service.gateway.where import Where
from service.validation import input_schema, parse

CREDIT = {
    "type": "object",
    "properties": {
        "customer-id": {"type": "string", "pattern": "^C-[0-9]+$"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "lines": {
            "type": "array",
            "items": {"$ref": "#/$defs/Line"},
        },
    },
    "required": ["customer-id", "amount_cents", "currency"],
    "$defs": {
        "Line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku"],
        }
    },
}


def credit_model() -> Any:
    return strict_model("desk_issue_credit", CREDIT, where="gw.yaml:3")


def problem_of(model: Any, arguments: dict[str, Any]) -> str:
    with pytest.raises(DomainError) as refused:
        parse(model, arguments)
    assert refused.value.code == "INVALID_ARGUMENT"
    return refused.value.message


# --- JSON Schema → strict model -----------------------------------------------------------


def test_the_model_keeps_the_upstream_names_and_refuses_what_the_schema_refuses():
    model = credit_model()
    good = {"customer-id": "C-1", "amount_cents": 5, "currency": "EUR", "lines": [{"sku": "a"}]}
    params = parse(model, {**good, "note": None})  # null is omitted
    assert params.model_dump(mode="json", exclude_none=True) == good
    assert "unknown field" in problem_of(model, {**good, "extra": 1})
    assert "unknown field" in problem_of(model, {**good, "lines": [{"sku": "a", "x": 1}]})
    assert "amount_cents" in problem_of(model, {**good, "amount_cents": "5"})  # no coercion
    assert "amount_cents" in problem_of(model, {**good, "amount_cents": True})
    assert "customer-id: must match" in problem_of(model, {**good, "customer-id": "X"})
    assert "control or invisible" in problem_of(model, {**good, "note": "hi\u202egnp.exe"})
    assert "tags" in problem_of(model, {**good, "tags": ["t"] * 101})  # arrays bounded
    assert "note" in problem_of(model, {**good, "note": "x" * 4097})  # strings bounded


def test_the_published_schema_is_strict_and_self_contained():
    schema = input_schema(credit_model())
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"customer-id", "amount_cents", "currency"}
    assert schema["properties"]["customer-id"]["pattern"] == "^C-[0-9]+$"
    assert schema["properties"]["note"]["anyOf"][1] == {"type": "null"}
    line = schema["properties"]["lines"]["anyOf"][0]["items"]
    assert line["additionalProperties"] is False
    assert "$ref" not in str(schema)
    assert "$defs" not in schema


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"type": "object", "properties": {"m": {"type": "object"}}}, "m: an object without"),
        (
            {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {}}}},
            "m: additionalProperties",
        ),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "a: an array needs"),
        (
            {"type": "object", "properties": {"s": {"type": "string", "multipleOf": 2}}},
            "multipleOf",
        ),
        (
            {
                "type": "object",
                "properties": {"u": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
            },
            "u: anyOf",
        ),
        (
            {
                "type": "object",
                "properties": {"r": {"$ref": "#/$defs/R"}},
                "$defs": {"R": {"$ref": "#/$defs/R"}},
            },
            "recursive",
        ),
        ({"type": "object", "properties": {"p": {"type": "string", "pattern": "("}}}, "p: pattern"),
        ({"type": "object", "properties": {"idempotency_key": {"type": "string"}}}, "collides"),
        ({"type": "array"}, "must be an object"),
    ],
)
def test_unsupported_schema_constructs_are_refused_naming_where(schema, named):
    with pytest.raises(GatewayError) as refused:
        strict_model("x_y", schema, where="gw.yaml:7: tools.y")
    assert str(refused.value).startswith("gw.yaml:7: tools.y")
    assert named in str(refused.value)


def test_the_published_propose_schema_survives_strict_mode_clients():
    """OpenAI's strict mode (the Agents SDK's ``ensure_strict_json_schema``, what
    ``convert_schemas_to_strict`` applies) makes every field required; a model that sends
    null for every optional one still makes a valid call."""
    from agents.strict_schema import ensure_strict_json_schema

    from service.toolcalls.schemas import propose_input_model

    model = propose_input_model("desk_issue_credit", credit_model())
    strict = ensure_strict_json_schema(input_schema(model))
    assert set(strict["required"]) == set(strict["properties"])
    every_field = {
        "customer-id": "C-1",
        "amount_cents": 5,
        "currency": "EUR",
        "tags": None,
        "note": None,
        "lines": None,
        "idempotency_key": None,
        "draft_id": None,
    }
    assert set(every_field) == set(strict["properties"])
    params = parse(model, every_field)
    assert params.model_dump(mode="json", exclude_none=True) == {
        "customer-id": "C-1",
        "amount_cents": 5,
        "currency": "EUR",
    }


def test_a_dropped_argument_is_not_the_agents_to_set():
    schema = {
        "type": "object",
        "properties": {"note": {"type": "string"}, "request_id": {"type": "string"}},
        "required": ["note"],
    }
    model = strict_model("x_y", schema, where="w", drop=frozenset({"request_id"}))
    assert "request_id" not in input_schema(model)["properties"]
    assert "unknown field" in problem_of(model, {"note": "n", "request_id": "mine"})


# --- templates ------------------------------------------------------------------------------


def test_a_template_renders_inert_values_and_money_with_the_iso_exponent():
    model = credit_model()
    template = parse_template(
        "Credit {amount_cents|money:currency} to {customer-id} ({lines|count} lines, "
        "first {lines[0].sku}) {{literal}}",
        model,
        where="w",
    )
    rendered = template.render(
        {"customer-id": "C-1", "amount_cents": 1250, "currency": "KWD", "lines": [{"sku": "a"}]}
    )
    assert rendered == "Credit 1.250 KWD to C-1 (1 lines, first a) {literal}"
    jpy = parse_template("{amount_cents|money:JPY}", model, where="w")
    assert jpy.render({"amount_cents": 1250}) == "1,250 JPY"
    hostile = parse_template("{note}", model, where="w").render({"note": "a\u202eb\x1b[2J"})
    assert hostile == "a\\u202eb\\u001b[2J"
    assert parse_template("{note}", model, where="w").render({}) == "(none)"


@pytest.mark.parametrize(
    ("source", "named"),
    [
        ("{nope}", "no field 'nope'"),
        ("{amount_cents|upper}", "unknown filter"),
        ("{customer-id|money:currency}", "|money needs an integer"),
        ("{amount_cents|money:XYZ}", "ISO 4217"),
        ("{amount_cents|money:tags}", "not a string field"),
        ("{lines}", "use |count"),
        ("{note.__class__}", "no field"),
        ("{amount_cents:>10}", "not a path"),
        ("{note", "unclosed"),
        ("a } b", "lone"),
    ],
)
def test_a_bad_template_is_a_startup_error_naming_it(source, named):
    with pytest.raises(GatewayError) as refused:
        parse_template(source, credit_model(), where="gw.yaml:9: tools.issue_credit.summary")
    assert "tools.issue_credit.summary" in str(refused.value)
    assert named in str(refused.value)


def test_money_paths_give_money_or_refuse_the_draft():
    model = credit_model()
    contract = WriteContract(
        McpTool(
            kind="write",
            summary="{amount_cents|money:currency}",
            money=MoneyPath(amount_minor="amount_cents", currency="currency"),
        ),
        model,
        where=Where("w"),
    )
    preview = contract.preview({"customer-id": "C-1", "amount_cents": 995, "currency": "USD"})
    assert preview.amount is not None
    assert (preview.amount.amount_minor, preview.amount.currency) == (995, "USD")
    assert preview.summary == "9.95 USD"
    with pytest.raises(DomainError):
        contract.preview({"customer-id": "C-1", "amount_cents": 995, "currency": "ABC"})
    decimal = MoneyPath(amount="price", currency="USD", exponent=2)
    assert decimal.amount_of({"price": "12.34"}).amount_minor == 1234
    with pytest.raises(DomainError):
        decimal.amount_of({"price": "12.345"})  # more digits than USD has
    with pytest.raises(ValueError, match="ISO 4217 exponent"):
        MoneyPath(amount="price", currency="JPY", exponent=2)
    with pytest.raises(GatewayError, match="no field 'missing'"):
        WriteContract(
            McpTool(
                kind="write", summary="x", money=MoneyPath(amount_minor="missing", currency="EUR")
            ),
            model,
            where=Where("w"),
        )


def test_masking_follows_declared_paths():
    data = {"entities": [{"name": "a", "observations": ["x", "y"]}], "email": "e@x", "n": 3}
    assert masked_paths(data, ["entities[*].observations", "email", "absent.path"]) == {
        "entities": [{"name": "a", "observations": ["***", "***"]}],
        "email": "***",
        "n": 3,
    }


# --- the file ------------------------------------------------------------------------------

GOOD = """\
version: 1
mcp:
  - namespace: memory
    transport: stdio
    command: node
    args: ["server.js"]
    env: {MEMORY_FILE_PATH: {env: MEMORY_FILE}}
    tools:
      read_graph: {kind: read, mask: ["entities[*].observations"]}
      create_entities:
        kind: write
        summary: "Create {entities|count} entities"
        risk: low
"""


def test_a_good_file_loads(tmp_path: Path):
    path = tmp_path / "gateway.yaml"
    path.write_text(GOOD)
    declared = load_gateway_file(path)
    [memory] = declared.of(McpStdio)
    assert memory.tools["create_entities"].risk.value == "low"
    assert memory.env["MEMORY_FILE_PATH"] == SecretRef(env="MEMORY_FILE")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (("kind: read, mask", "kind: wrte, mask"), "gw.yaml:9: mcp[0].tools.read_graph.kind:"),
        (("    command: node\n", ""), "gw.yaml:3: mcp[0].command: required"),
        (
            ("risk: low", "risk: low\n        colour: blue"),
            "gw.yaml:14: mcp[0].tools.create_entities.colour: unknown key",
        ),
        (
            ("{env: MEMORY_FILE}", "{env: MEMORY_FILE, file: /x}"),
            "gw.yaml:7: mcp[0].env.MEMORY_FILE_PATH",
        ),
        (
            ('        summary: "Create {entities|count} entities"\n', ""),
            "gw.yaml:10: mcp[0].tools.create_entities: Value error, a write needs a summary",
        ),
        (("version: 1", "version: 2"), "gw.yaml:1: version:"),
        (("namespace: memory", "namespace: Memory!"), "gw.yaml:3: mcp[0].namespace:"),
        (
            ("    transport: stdio\n", "    transport: stdio\n    transport: http\n"),
            "gw.yaml:5: mcp[0].transport: the key is written twice",
        ),
        (('args: ["server.js"]', 'args: ["server.js"'), "gw.yaml:7: (file): not valid YAML"),
    ],
)
def test_a_bad_file_names_the_line_and_the_path(edit, expected):
    text = GOOD.replace(*edit)
    with pytest.raises(GatewayError) as refused:
        parse_gateway_text(text, name="gw.yaml")
    assert expected.replace("Value error, ", "") in str(refused.value), str(refused.value)


def test_http_upstreams_need_https_or_loopback_and_no_inline_credentials():
    base = (
        "version: 1\nmcp:\n  - namespace: up\n    transport: http\n    url: {url}\n"
        "    tools: {{}}\n"
    )
    for url in ("http://10.0.0.1/mcp", "https://user:pw@up.example/mcp", "ftp://up.example"):
        with pytest.raises(GatewayError):
            parse_gateway_text(base.format(url=url), name="gw.yaml")
    for url in ("https://up.example/mcp", "http://127.0.0.1:9/mcp", "http://localhost/mcp"):
        parse_gateway_text(base.format(url=url), name="gw.yaml")


def test_secret_references_resolve_and_name_only_the_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("GW_TOKEN", "s3cret")
    assert SecretRef(env="GW_TOKEN", prefix="Bearer ").resolve(where="w") == "Bearer s3cret"
    secret_file = tmp_path / "token"
    secret_file.write_text("from-file\n")
    assert SecretRef(file=str(secret_file)).resolve(where="w") == "from-file"
    monkeypatch.delenv("GW_TOKEN")
    with pytest.raises(GatewayError, match="GW_TOKEN is not set"):
        SecretRef(env="GW_TOKEN").resolve(where="w")
