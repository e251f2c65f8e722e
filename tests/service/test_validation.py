"""Strict validation of untrusted arguments: no coercion, no unknowns, bounded size, and
null meaning exactly "omitted" (DESIGN.md §3: strict-mode clients send every field)."""

from __future__ import annotations

from enum import StrEnum

import pytest
from pydantic import BaseModel, Field, ValidationError

from service.canonical import params_sha256
from service.errors import Category, DomainError
from service.money import Money
from service.shop.schemas import RefundInput
from service.validation import StrictInput, check_bounds, input_schema, output_schema, parse


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(StrictInput):
    code: str = Field(pattern=r"^[A-Z]{2}$")
    count: int = Field(default=1, ge=1, le=5)


class Outer(StrictInput):
    name: str = Field(min_length=1, max_length=10)
    quantity: int
    colour: Colour
    note: str | None = Field(default=None, min_length=1, max_length=20)
    inner: Inner
    extra_inner: Inner | None = None
    tags: list[str] = Field(default_factory=list, max_length=3)


VALID = {"name": "widget", "quantity": 12, "colour": "red", "inner": {"code": "AB"}}


class View(BaseModel):
    label: str
    amount: Money | None = None
    comment: str | None = None


def _refusal(model, arguments) -> DomainError:
    with pytest.raises(DomainError) as caught:
        parse(model, arguments)
    error = caught.value
    assert error.code == "INVALID_ARGUMENT"
    assert error.category is Category.INVALID_ARGUMENT
    assert error.retryable is False
    return error


def test_valid_arguments_parse():
    parsed = parse(Outer, VALID)
    assert parsed.quantity == 12
    assert parsed.colour is Colour.RED
    assert parsed.inner == Inner(code="AB", count=1)
    assert parsed.note is None


@pytest.mark.parametrize("quantity", ["12", True, 12.0, 12.5, [12]])
def test_no_coercion_into_int(quantity):
    error = _refusal(Outer, {**VALID, "quantity": quantity})
    assert error.details["problems"] == ["quantity: Input should be a valid integer"]


@pytest.mark.parametrize("name", [12, True, ["widget"]])
def test_no_coercion_into_str(name):
    error = _refusal(Outer, {**VALID, "name": name})
    assert error.details["problems"] == ["name: Input should be a valid string"]


def test_enum_values_are_enforced_server_side():
    error = _refusal(Outer, {**VALID, "colour": "RED"})
    assert error.details["problems"] == ["colour: Input should be 'red' or 'blue'"]


def test_unknown_top_level_field_is_refused():
    error = _refusal(Outer, {**VALID, "tenant_id": "shop-b"})
    assert error.details["problems"] == ["tenant_id: unknown field; remove it"]


def test_unknown_nested_field_is_refused():
    error = _refusal(Outer, {**VALID, "inner": {"code": "AB", "admin": True}})
    assert error.details["problems"] == ["inner.admin: unknown field; remove it"]


def _digest(parsed: StrictInput) -> str:
    return params_sha256(parsed.model_dump(mode="json", exclude_none=True))


def test_null_for_an_optional_field_means_omitted_with_the_same_digest():
    with_null = parse(Outer, {**VALID, "note": None})
    assert with_null.note is None
    assert with_null == parse(Outer, VALID)
    assert _digest(with_null) == _digest(parse(Outer, VALID))


def test_null_for_an_optional_nested_model_means_omitted():
    assert parse(Outer, {**VALID, "extra_inner": None}) == parse(Outer, VALID)


def test_null_inside_a_nested_object_means_its_default():
    parsed = parse(Outer, {**VALID, "inner": {"code": "AB", "count": None}})
    assert parsed.inner == Inner(code="AB", count=1)


def test_a_strict_client_filling_every_field_with_null_gets_the_defaults():
    every = {**VALID, "note": None, "extra_inner": None, "tags": None}
    assert parse(Outer, every) == parse(Outer, VALID)


def test_null_for_a_required_field_is_refused_as_missing_naming_null():
    error = _refusal(Outer, {**VALID, "name": None, "inner": {"code": None}})
    assert error.details["problems"] == [
        "name: required; null means omitted, so send a value",
        "inner.code: required; null means omitted, so send a value",
    ]


def test_null_as_a_list_item_is_refused_not_dropped():
    error = _refusal(Outer, {**VALID, "tags": ["a", None]})
    assert error.details["problems"] == ["tags.1: Input should be a valid string"]


def test_missing_null_and_empty_string():
    assert parse(Outer, VALID).note is None  # missing: allowed
    assert parse(Outer, {**VALID, "note": None}).note is None  # null: the same as missing
    empty = _refusal(Outer, {**VALID, "note": ""})
    assert empty.details["problems"] == ["note: String should have at least 1 character"]


def test_strings_and_lists_are_bounded():
    error = _refusal(Outer, {**VALID, "name": "x" * 11, "tags": ["a", "b", "c", "d"]})
    assert error.details["problems"] == [
        "name: String should have at most 10 characters",
        "tags: List should have at most 3 items after validation, not 4",
    ]


def test_pattern_problem_names_the_pattern():
    error = _refusal(Outer, {**VALID, "inner": {"code": "abc"}})
    assert error.details["problems"] == ["inner.code: must match ^[A-Z]{2}$"]


def test_every_problem_is_listed_at_once():
    error = _refusal(
        Outer,
        {
            "name": "",
            "quantity": "12",
            "colour": "green",
            "inner": {"code": "abc", "count": 9},
            "surprise": 1,
        },
    )
    problems = error.details["problems"]
    assert problems == [
        "name: String should have at least 1 character",
        "quantity: Input should be a valid integer",
        "colour: Input should be 'red' or 'blue'",
        "inner.code: must match ^[A-Z]{2}$",
        "inner.count: Input should be less than or equal to 5",
        "surprise: unknown field; remove it",
    ]
    # The message carries every problem too, for clients that only show text.
    for problem in problems:
        assert problem in error.message


def test_missing_required_fields_are_all_listed():
    error = _refusal(Outer, {})
    assert error.details["problems"] == [
        "name: Field required",
        "quantity: Field required",
        "colour: Field required",
        "inner: Field required",
    ]


def test_a_null_does_not_hide_the_other_problems():
    """parse() must list every problem; an omitted-by-null field must not mask the others."""
    error = _refusal(Outer, {**VALID, "note": None, "quantity": "12", "surprise": 1})
    assert error.details["problems"] == [
        "quantity: Input should be a valid integer",
        "surprise: unknown field; remove it",
    ]


# --- check_bounds -------------------------------------------------------------------------


def _nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


def test_depth_up_to_the_limit_is_accepted():
    check_bounds(_nested(6), max_bytes=10_000, max_depth=6)
    check_bounds({"a": [[[1]]]}, max_bytes=10_000, max_depth=4)


def test_depth_beyond_the_limit_is_refused():
    with pytest.raises(DomainError) as caught:
        check_bounds(_nested(7), max_bytes=10_000, max_depth=6)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.details == {"max_depth": 6}
    assert "nested too deeply" in caught.value.message


def test_lists_count_as_nesting():
    with pytest.raises(DomainError) as caught:
        check_bounds({"a": [[[[1]]]]}, max_bytes=10_000, max_depth=4)
    assert caught.value.details == {"max_depth": 4}


def test_hostile_depth_is_refused_without_recursing_all_the_way():
    value: list = []
    for _ in range(50_000):  # far deeper than Python's recursion limit
        value = [value]
    with pytest.raises(DomainError) as caught:
        check_bounds({"a": value}, max_bytes=10_000_000, max_depth=6)
    assert caught.value.details == {"max_depth": 6}


def test_size_up_to_the_limit_is_accepted_and_beyond_refused():
    arguments = {"s": "x" * 100}
    size = len(b'{"s":"' + b"x" * 100 + b'"}')  # compact JSON: no whitespace is counted
    check_bounds(arguments, max_bytes=size, max_depth=6)
    with pytest.raises(DomainError) as caught:
        check_bounds(arguments, max_bytes=size - 1, max_depth=6)
    assert caught.value.details == {"max_bytes": size - 1}
    assert f"({size} bytes; at most {size - 1})" in caught.value.message


def test_size_counts_utf8_bytes_not_characters():
    arguments = {"s": "€" * 100}  # 300 bytes in UTF-8
    with pytest.raises(DomainError):
        check_bounds(arguments, max_bytes=250, max_depth=6)


@pytest.mark.parametrize("arguments", [[], "text", 12, None])
def test_arguments_must_be_an_object(arguments):
    with pytest.raises(DomainError) as caught:
        check_bounds(arguments, max_bytes=10_000, max_depth=6)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message == "Arguments must be a JSON object."


# --- published schemas --------------------------------------------------------------------


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def test_input_schema_inlines_every_ref():
    schema = input_schema(Outer)
    assert "$defs" not in schema
    assert all("$ref" not in node for node in _walk(schema))
    inner = schema["properties"]["inner"]
    assert inner["type"] == "object"
    assert inner["properties"]["code"]["pattern"] == "^[A-Z]{2}$"


def test_input_schema_forbids_additional_properties_on_every_object():
    schema = input_schema(Outer)
    objects = [node for node in _walk(schema) if node.get("type") == "object"]
    assert len(objects) == 3  # Outer, inner, extra_inner
    assert all(node.get("additionalProperties") is False for node in objects)


NULL = {"type": "null"}


def _value_branch(prop: dict) -> dict:
    return next(branch for branch in prop["anyOf"] if branch != NULL)


def test_input_schema_publishes_every_optional_field_nullable_and_required_ones_not():
    schema = input_schema(Outer)
    assert set(schema["required"]) == {"name", "quantity", "colour", "inner"}
    for name, prop in schema["properties"].items():
        assert (NULL in prop.get("anyOf", [])) is (name not in schema["required"]), name
    note = schema["properties"]["note"]
    assert _value_branch(note) == {"type": "string", "minLength": 1, "maxLength": 20}
    assert "default" not in note  # null is omission, not a value to default to
    extra_inner = _value_branch(schema["properties"]["extra_inner"])
    assert extra_inner["type"] == "object"
    assert extra_inner["additionalProperties"] is False
    count = schema["properties"]["inner"]["properties"]["count"]
    assert _value_branch(count) == {"type": "integer", "minimum": 1, "maximum": 5}
    # No published default (strict conversion would keep it beside a required field, and a
    # model copies it): the server applies it, and the description says what it is.
    assert "default" not in count
    assert count["description"].endswith("Default: 1.")


def test_input_schema_keeps_enums_and_bounds():
    schema = input_schema(Outer)
    assert schema["properties"]["colour"]["enum"] == ["red", "blue"]
    assert _value_branch(schema["properties"]["tags"])["maxItems"] == 3
    assert schema["properties"]["name"]["maxLength"] == 10


def test_input_schema_is_valid_and_agrees_with_the_server():
    import jsonschema

    schema = input_schema(Outer)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for accepted in (VALID, {**VALID, "note": None}, {**VALID, "extra_inner": None}):
        assert validator.is_valid(accepted)
        parse(Outer, accepted)
    for refused in (
        {**VALID, "name": None},
        {**VALID, "surprise": 1},
        {**VALID, "inner": {"code": "AB", "x": 1}},
        {**VALID, "tags": ["a", None]},
    ):
        assert not validator.is_valid(refused)
        with pytest.raises(DomainError):
            parse(Outer, refused)


def test_output_schema_keeps_null_branches():
    schema = output_schema(View)
    assert "$defs" not in schema
    assert all("$ref" not in node for node in _walk(schema))
    amount_branches = schema["properties"]["amount"]["anyOf"]
    assert {"type": "null"} in amount_branches
    money = next(branch for branch in amount_branches if branch != {"type": "null"})
    assert money["properties"]["currency"]["pattern"] == "^[A-Z]{3}$"
    assert {"type": "null"} in schema["properties"]["comment"]["anyOf"]
    # Output schemas describe what we send; they do not add additionalProperties.
    assert "additionalProperties" not in schema


def test_strict_input_models_are_frozen():
    parsed = parse(Outer, VALID)
    with pytest.raises(ValidationError):
        parsed.quantity = 1  # type: ignore[misc]


def test_free_text_too_long_is_counted_in_characters_not_items():
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": 1, "currency": "USD"},
        "reason": "damaged",
        "note": "x" * 501,
    }
    error = _refusal(RefundInput, arguments)
    assert error.details["problems"] == ["note: at most 500 characters, not 501"]
