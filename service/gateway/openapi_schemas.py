"""OpenAPI schemas as the gateway's JSON Schema: references inlined, 3.0 idioms translated,
and the documented fields of an answer listed (for ``service.gateway.openapi``)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from service.gateway.errors import GatewayError

# Dropped: they describe, or belong to the document rather than the value.
DROPPED_KEYWORDS = frozenset(
    {"title", "example", "xml", "externalDocs", "discriminator", "contentMediaType"}
)


class Resolver:
    """Inlines ``#/components/...`` references and translates OpenAPI 3.0 idioms."""

    def __init__(self, document: Mapping[str, Any], source: str) -> None:
        self.document = document
        self.source = source
        # The unions of request schemas narrowed to their first option (the gateway takes one
        # type per field): the importer tells the operator each one.
        self.narrowed: list[str] = []

    def target(self, reference: str, seen: tuple[str, ...]) -> Any:
        if not reference.startswith("#/"):
            raise GatewayError(f"{self.source}: $ref {reference!r} is not inside the document")
        if reference in seen:
            raise GatewayError(
                f"{self.source}: $ref {reference!r} is recursive; the gateway refuses "
                "recursive schemas"
            )
        node: Any = self.document
        for escaped in reference[2:].split("/"):
            part = escaped.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                raise GatewayError(f"{self.source}: $ref {reference!r} points nowhere")
            node = node[part]
        return node

    def deref(self, node: Any, seen: tuple[str, ...] = ()) -> Any:
        """A parameter, body or response object with its own ``$ref`` followed."""
        while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            reference = node["$ref"]
            node, seen = self.target(reference, seen), (*seen, reference)
        return node

    def schema(self, node: Any, seen: tuple[str, ...] = (), *, request: bool = True) -> Any:
        if isinstance(node, list):
            return [self.schema(item, seen, request=request) for item in node]
        if not isinstance(node, Mapping):
            return node
        if isinstance(node.get("$ref"), str):
            reference = node["$ref"]
            merged = {
                **self.target(reference, seen),
                **{k: v for k, v in node.items() if k != "$ref"},
            }
            return self.schema(merged, (*seen, reference), request=request)
        result: dict[str, Any] = {}
        for key, value in node.items():
            if key in DROPPED_KEYWORDS or key.startswith("x-"):
                continue
            if key == "properties" and isinstance(value, Mapping):
                result[key] = {
                    name: self.schema(sub, seen, request=request)
                    for name, sub in value.items()
                    if not (request and isinstance(sub, Mapping) and sub.get("readOnly"))
                }
            elif key in ("examples", "default", "enum", "const", "required"):
                result[key] = copy.deepcopy(value)
            else:
                result[key] = self.schema(value, seen, request=request)
        if request and "required" in result and "properties" in result:
            result["required"] = [r for r in result["required"] if r in result["properties"]]
        result = json_schema(result)
        return self._one_type(result) if request else result

    def _one_type(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A union of several schemas (``oneOf: [string, integer]``) narrowed to its first,
        null kept: a field the gateway validates has one type."""
        for keyword in ("oneOf", "anyOf"):
            options = schema.get(keyword)
            if not isinstance(options, list):
                continue
            others = [o for o in options if o != {"type": "null"}]
            if len(others) < 2 or not isinstance(others[0], dict):
                continue
            first = others[0]
            self.narrowed.append(
                f"a {keyword} of {len(others)} schemas was narrowed to its first "
                f"({schema_type(first) or 'an object'})"
            )
            rest = {k: v for k, v in schema.items() if k != keyword}
            if len(others) == len(options):
                return {**first, **rest}
            return {**rest, keyword: [first, {"type": "null"}]}
        return schema


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 spellings → JSON Schema: ``nullable``, boolean exclusive bounds, a
    single ``allOf`` (how generators attach a description to a reference)."""
    if schema.pop("nullable", False) and "type" in schema and isinstance(schema["type"], str):
        schema["type"] = [schema["type"], "null"]
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if schema.get(exclusive) is True and bound in schema:
            schema[exclusive] = schema.pop(bound)
        elif schema.get(exclusive) is False:
            del schema[exclusive]
    if schema.get("type") == "integer":  # 1.0 where a generator wrote a float bound
        for bound in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            value = schema.get(bound)
            if isinstance(value, float) and value.is_integer():
                schema[bound] = int(value)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        schema = {**all_of[0], **rest}
    return schema


MAX_FIELD_DEPTH = 3


def leaves(schema: Mapping[str, Any], prefix: str, *, depth: int) -> list[str]:
    """The documented fields of an answer, down to scalars (so each can be kept or masked)."""
    schema = non_null(schema)
    kind = schema_type(schema)
    if kind == "array" and isinstance(schema.get("items"), Mapping) and depth < MAX_FIELD_DEPTH:
        inner = leaves(schema["items"], f"{prefix}[*]", depth=depth + 1)
        return inner if inner != [f"{prefix}[*]"] else [prefix]
    members = schema.get("properties") if kind in ("object", None) else None
    if not isinstance(members, Mapping) or not members or depth >= MAX_FIELD_DEPTH:
        return [prefix] if prefix else []
    found: list[str] = []
    for name, member in members.items():
        if plain(name) and isinstance(member, Mapping):
            found += leaves(member, f"{prefix}.{name}" if prefix else name, depth=depth + 1)
    return found


def non_null(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    options = [o for o in schema.get("anyOf") or [] if o != {"type": "null"}]
    return options[0] if len(options) == 1 and isinstance(options[0], Mapping) else schema


def plain(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]{0,63}", name) is not None


def schema_type(schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and isinstance(schema.get("anyOf"), list):
        others = [o for o in schema["anyOf"] if o != {"type": "null"}]
        return schema_type(others[0]) if len(others) == 1 else None
    return kind if isinstance(kind, str) else None
