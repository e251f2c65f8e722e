"""An upstream's (or a declared) JSON Schema, made into a strict input model.

Only a subset of JSON Schema is accepted, the part a strict model can enforce exactly:
objects (properties, required, ``additionalProperties: false``), strings (min/maxLength,
pattern, enum; ``format`` ignored), integers and numbers (minimum, maximum, exclusive
bounds), booleans, arrays (items, min/maxItems), enum/const, nullable types (a type list
or ``anyOf`` with null), local ``$ref``s, and descriptions. Anything else is refused when
the gateway starts, naming where it is: a constraint draftgate could not enforce would be
shown to approvers as if it held.

Property names are kept as they are (aliases), so a model's dump is exactly the upstream's
arguments. Strings get a length bound and arrays an item bound when the schema has none;
every string is free text from an agent, so it is ``SafeText``. A nullable field is
optional: null means omitted (DESIGN.md §3).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from service.gateway.errors import GatewayError
from service.validation import SafeText, StrictInput

DEFAULT_MAX_LENGTH = 4096
DEFAULT_MAX_ITEMS = 100
MAX_SAFE_INTEGER = 2**53 - 1  # the largest integer every JSON reader (and RFC 8785) keeps
MAX_DEPTH = 16  # nesting of objects and arrays; deeper schemas are refused
# $refs are inlined on every use, so a small schema can name exponentially many nodes.
MAX_SCHEMA_NODES = 10_000
CONTROL_NAMES = frozenset({"idempotency_key", "draft_id"})  # every propose_* owns these

# Keywords that describe rather than constrain: accepted and dropped.
_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "format",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_KEYWORDS: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "required", "additionalProperties", "$defs", "definitions"}),
    "string": frozenset({"minLength", "maxLength", "pattern", "enum", "const"}),
    "integer": frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const"}
    ),
    "number": frozenset(
        {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "enum", "const"}
    ),
    "boolean": frozenset({"enum", "const"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
}
_ENUM_ONLY = frozenset({"enum", "const"})
_SAFE_TEXT: tuple[Any, ...] = getattr(SafeText, "__metadata__", ())  # its validator


class GatewayInput(StrictInput):
    """Base of every model made from a JSON Schema: dumps use the upstream's own names, and
    patterns are Python regular expressions (upstream patterns use look-arounds the default
    engine lacks); the length bound on every string keeps them cheap to match."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        regex_engine="python-re",
        serialize_by_alias=True,
        validate_by_alias=True,
        validate_by_name=False,
    )

    def __getattr__(self, item: str) -> Any:
        # Fields are named by position and aliased to the upstream's names (which need not be
        # identifiers); code that reads a field by the name it dumps under finds it.
        for name, info in type(self).model_fields.items():
            if info.alias == item:
                return getattr(self, name)
        return super().__getattr__(item)  # type: ignore[misc]


def strict_model(
    name: str,
    schema: dict[str, Any],
    *,
    where: str,
    drop: frozenset[str] = frozenset(),
) -> type[StrictInput]:
    """The strict input model of an object schema, or GatewayError naming ``where``.

    ``drop`` names top-level properties the agent must not set (an idempotency argument
    draftgate fills in itself at execution): they are left out of the model.
    """
    if not isinstance(schema, dict):
        raise GatewayError(f"{where}: the input schema is not a JSON object")
    builder = _Builder(name, schema, where)
    schema = builder.resolve(schema, "")
    kind = schema.get("type", "object")
    if kind != "object":
        raise GatewayError(f"{where}: the input schema must be an object, not {kind!r}")
    # The root's keywords are checked as every other object's: one dropped silently
    # (oneOf, not, minProperties...) would be shown to approvers as if it held.
    unsupported = sorted(set(schema) - _ANNOTATIONS - _KEYWORDS["object"] - {"type"})
    if unsupported:
        raise builder.fail("", f"keyword {unsupported[0]!r} is not supported for object")
    for control in sorted(CONTROL_NAMES - drop):
        if control in (schema.get("properties") or {}):
            raise GatewayError(
                f"{where}: property {control!r} collides with the propose_* control argument "
                "of that name (declare it as idempotency_argument if it takes the key)"
            )
    return builder.model(schema, name, path="", depth=0, drop=drop)


class _Builder:
    def __init__(self, name: str, root: dict[str, Any], where: str) -> None:
        self.name = name
        self.where = where
        self.nodes = 0
        self.definitions: dict[str, Any] = {
            **(root.get("definitions") or {}),
            **(root.get("$defs") or {}),
        }

    def fail(self, path: str, problem: str) -> GatewayError:
        return GatewayError(f"{self.where}: {path or '(input)'}: {problem}")

    def model(
        self,
        schema: dict[str, Any],
        name: str,
        *,
        path: str,
        depth: int,
        drop: frozenset[str] = frozenset(),
    ) -> type[StrictInput]:
        additional = schema.get("additionalProperties", False)
        if additional not in (False, None):
            raise self.fail(
                path,
                "additionalProperties other than false is not supported (a free-form map "
                "cannot be made strict); declare its properties",
            )
        properties = schema.get("properties")
        if properties is None:
            properties = {}
            if depth > 0:
                raise self.fail(path, "an object without properties (free-form) is not supported")
        if not isinstance(properties, dict):
            raise self.fail(path, "properties must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise self.fail(path, "required must be a list of property names")
        unknown = sorted(set(required) - set(properties))
        if unknown:
            raise self.fail(path, f"required names undeclared properties: {', '.join(unknown)}")
        fields: dict[str, Any] = {}
        for index, (prop, sub) in enumerate(properties.items()):
            if prop in drop:
                continue
            if not isinstance(prop, str) or not prop or len(prop) > 64:
                raise self.fail(path, f"property name {prop!r} is not usable")
            sub_path = f"{path}.{prop}" if path else prop
            fields[f"field_{index}"] = self.field(
                sub,
                f"{name}_{index}",
                alias=prop,
                path=sub_path,
                depth=depth + 1,
                optional=prop not in required,
            )
        model: type[StrictInput] = create_model(
            _class_name(name) if depth else _class_name(self.name),
            __base__=GatewayInput,
            **fields,
        )
        return model

    def field(
        self, schema: Any, name: str, *, alias: str, path: str, depth: int, optional: bool
    ) -> tuple[Any, FieldInfo]:
        annotation, nullable, description = self.annotation(schema, name, path=path, depth=depth)
        if optional or nullable:
            # Null means omitted: a nullable field is optional (DESIGN.md §3).
            omittable: Any = Field(default=None, alias=alias, description=description)
            return annotation | None, omittable
        needed: Any = Field(alias=alias, description=description)
        return annotation, needed

    def annotation(
        self, schema: Any, name: str, *, path: str, depth: int
    ) -> tuple[Any, bool, str | None]:
        """(type, nullable, description) of one property's schema."""
        if depth > MAX_DEPTH:
            raise self.fail(path, f"nested deeper than {MAX_DEPTH} levels")
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise self.fail(
                path, f"the schema has more than {MAX_SCHEMA_NODES} nodes ($refs inlined)"
            )
        if not isinstance(schema, dict):
            raise self.fail(path, "the schema is not an object (true/false schemas are refused)")
        schema = self.resolve(schema, path)
        description = schema.get("description")
        if description is not None and not isinstance(description, str):
            raise self.fail(path, "description must be a string")
        nullable = "anyOf" in schema or "oneOf" in schema
        if nullable:
            schema = self.non_null(schema, path)
            description = description or schema.get("description")
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"]
            if len(kinds) != 1:
                raise self.fail(path, f"type {kind!r}: only one type (or one type and null)")
            nullable = nullable or len(kinds) != len(kind)
            kind = kinds[0]
        if kind is None and ("enum" in schema or "const" in schema):
            return self.enum(schema, path, allowed=_ENUM_ONLY), nullable, description
        if kind not in _KEYWORDS:
            raise self.fail(path, f"type {kind!r} is not supported")
        unsupported = sorted(set(schema) - _ANNOTATIONS - _KEYWORDS[kind] - {"type"})
        if unsupported:
            raise self.fail(path, f"keyword {unsupported[0]!r} is not supported for {kind}")
        if "enum" in schema or "const" in schema:
            return self.enum(schema, path, allowed=_KEYWORDS[kind]), nullable, description
        return self.typed(kind, schema, name, path=path, depth=depth), nullable, description

    def non_null(self, schema: dict[str, Any], path: str) -> dict[str, Any]:
        """The one schema of ``anyOf``/``oneOf: [schema, {type: null}]``."""
        keyword = "anyOf" if "anyOf" in schema else "oneOf"
        options = schema[keyword]
        if not isinstance(options, list):
            raise self.fail(path, f"{keyword} must be a list")
        others = [o for o in options if o != {"type": "null"}]
        if len(others) != 1 or len(others) == len(options):
            raise self.fail(
                path, f"{keyword} is supported only as one schema or null (a nullable type)"
            )
        rest = {k: v for k, v in schema.items() if k != keyword}
        if set(rest) - _ANNOTATIONS:
            raise self.fail(path, f"{keyword} beside other constraints is not supported")
        inner = self.resolve(others[0], path) if isinstance(others[0], dict) else others[0]
        if not isinstance(inner, dict):
            raise self.fail(path, f"{keyword} holds a schema that is not an object")
        return {**inner, **rest}

    def typed(self, kind: str, schema: dict[str, Any], name: str, *, path: str, depth: int) -> Any:
        if kind == "object":
            return self.model(schema, name, path=path, depth=depth)
        if kind == "string":
            pattern = schema.get("pattern")
            if pattern is not None:
                try:
                    re.compile(pattern)
                except (re.error, TypeError) as exc:
                    problem = f"pattern {pattern!r} is not a regular expression: {exc}"
                    raise self.fail(path, problem) from None
            # The constraints before SafeText's validator, so the published schema keeps them;
            # CRLF and NFC first, so they hold for the text SafeText passes on (it normalises).
            return Annotated[
                str,
                Field(
                    min_length=self.bound(schema, "minLength", path),
                    max_length=self.upper(schema, "maxLength", path, DEFAULT_MAX_LENGTH),
                    pattern=pattern,
                ),
                BeforeValidator(_nfc),  # wraps the constrained str: runs before its checks
                *_SAFE_TEXT,
            ]
        if kind in ("integer", "number"):
            bounds = {
                "ge": schema.get("minimum"),
                "le": schema.get("maximum"),
                "gt": schema.get("exclusiveMinimum"),
                "lt": schema.get("exclusiveMaximum"),
            }
            for keyword, value in bounds.items():
                if value is not None and (
                    isinstance(value, bool) or not isinstance(value, int | float)
                ):
                    raise self.fail(path, f"bound {keyword} must be a number")
            python_type = int if kind == "integer" else float
            limits = _within_safe_range(bounds)
            if kind == "number":
                limits["allow_inf_nan"] = False
            return Annotated[python_type, Field(**limits)]
        if kind == "boolean":
            return bool
        items = schema.get("items")
        if not isinstance(items, dict):
            raise self.fail(path, "an array needs one items schema")
        item_type, item_nullable, _ = self.annotation(
            items, f"{name}_item", path=f"{path}[*]", depth=depth + 1
        )
        if item_nullable:
            raise self.fail(f"{path}[*]", "nullable array items are not supported")
        return Annotated[
            list[item_type],  # type: ignore[valid-type]
            Field(
                min_length=self.bound(schema, "minItems", path),
                max_length=self.upper(schema, "maxItems", path, DEFAULT_MAX_ITEMS),
            ),
        ]

    def enum(self, schema: dict[str, Any], path: str, *, allowed: frozenset[str]) -> Any:
        unsupported = sorted(set(schema) - _ANNOTATIONS - allowed - {"type"})
        if unsupported:
            raise self.fail(path, f"keyword {unsupported[0]!r} is not supported beside enum")
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list) or not values:
            raise self.fail(path, "enum must be a non-empty list")
        if not all(isinstance(v, str | int | bool) and not isinstance(v, float) for v in values):
            raise self.fail(path, "enum values must be strings, integers or booleans")
        for value in values:
            if isinstance(value, str) and len(value) > DEFAULT_MAX_LENGTH:
                raise self.fail(path, "an enum value is too long")
        return Literal[tuple(values)]

    def bound(self, schema: dict[str, Any], keyword: str, path: str) -> int | None:
        value = schema.get(keyword)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(path, f"{keyword} must be a non-negative integer")
        return value

    def upper(self, schema: dict[str, Any], keyword: str, path: str, default: int) -> int:
        """The schema's upper bound, but never above draftgate's default (0 is kept)."""
        value = self.bound(schema, keyword, path)
        return default if value is None else min(value, default)

    def resolve(self, schema: dict[str, Any], path: str, seen: tuple[str, ...] = ()) -> Any:
        """Inline a local ``$ref`` (``#/$defs/X`` or ``#/definitions/X``); refuse others."""
        reference = schema.get("$ref")
        if reference is None:
            return schema
        if not isinstance(reference, str):
            raise self.fail(path, "$ref must be a string")
        match = re.fullmatch(r"#/(?:\$defs|definitions)/([^/]+)", reference)
        if match is None or match.group(1) not in self.definitions:
            raise self.fail(path, f"$ref {reference!r} is not a local definition")
        if reference in seen or len(seen) > MAX_DEPTH:
            raise self.fail(path, f"$ref {reference!r} is recursive; recursive schemas are refused")
        target = self.definitions[match.group(1)]
        if not isinstance(target, dict):
            raise self.fail(path, f"$ref {reference!r} is not an object schema")
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return self.resolve(merged, path, (*seen, reference))


def _within_safe_range(bounds: dict[str, Any]) -> dict[str, Any]:
    """The declared bounds, inside ±(2^53 - 1): a value beyond that validates, then cannot
    be hashed as RFC 8785 JSON (the draft's digest), so it is refused up front."""
    limits = {k: v for k, v in bounds.items() if v is not None}
    low, high = -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER
    if limits.get("gt", low) < low:
        del limits["gt"]
    if limits.get("lt", high) > high:
        del limits["lt"]
    if "gt" not in limits or "ge" in limits:
        limits["ge"] = max(limits.get("ge", low), low)
    if "lt" not in limits or "le" in limits:
        limits["le"] = min(limits.get("le", high), high)
    return limits


def _nfc(value: Any) -> Any:
    """The text SafeText passes on (CRLF as LF, NFC), before the declared constraints."""
    if not isinstance(value, str):
        return value
    return unicodedata.normalize("NFC", value.replace("\r\n", "\n"))


def _class_name(name: str) -> str:
    words = re.split(r"[^A-Za-z0-9]+", name)
    return "".join(word[:1].upper() + word[1:] for word in words if word) or "GatewayInput"
