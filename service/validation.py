"""Strict validation of untrusted arguments (DESIGN.md §3, input hardening).

Arguments from a model are parsed as JSON in pydantic's strict mode: no
coercion ("12" is not 12, true is not 1), unknown fields refused, and an
explicit ``null`` is refused rather than read as "missing". Size and nesting
depth are bounded before any model sees the value.
"""

from __future__ import annotations

import copy
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from service.errors import invalid_argument

ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictInput(BaseModel):
    """Base of every model that parses untrusted input."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_missing(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = sorted(key for key, value in data.items() if value is None)
            if nulls:
                raise ValueError(
                    f"null is not accepted for {', '.join(nulls)}; omit an optional field instead"
                )
        return data


def check_bounds(arguments: Any, *, max_bytes: int, max_depth: int) -> None:
    """Refuse argument objects that are too large or nested too deeply."""
    if not isinstance(arguments, dict):
        raise invalid_argument("Arguments must be a JSON object.")
    depth = _depth(arguments, limit=max_depth)
    if depth > max_depth:
        raise invalid_argument(
            f"Arguments are nested too deeply (more than {max_depth} levels).",
            details={"max_depth": max_depth},
        )
    size = len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode())
    if size > max_bytes:
        raise invalid_argument(
            f"Arguments are too large ({size} bytes; at most {max_bytes}).",
            details={"max_bytes": max_bytes},
        )


def _depth(value: Any, *, limit: int) -> int:
    """Nesting depth of containers (a flat object is 1), counted no further than limit + 1."""
    if not isinstance(value, dict | list):
        return 0
    if limit < 0:  # stop early: the exact depth of a hostile value does not matter
        return 1
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit=limit - 1) for child in children), default=0)


def parse(model: type[ModelT], arguments: dict[str, Any]) -> ModelT:
    """Validate arguments against a strict model, or raise INVALID_ARGUMENT naming every problem.

    Explicit nulls are reported as problems of their own, next to whatever else
    is wrong, rather than hiding the other problems.
    """
    null_paths = _null_paths(arguments)
    problems = [
        f"{path}: null is not accepted; omit an optional field instead" for path in null_paths
    ]
    try:
        parsed = model.model_validate_json(json.dumps(_without_nulls(arguments)))
    except ValidationError as exc:
        problems += [
            _describe(error)
            for error in exc.errors(include_url=False)
            # a required field sent as null is already reported as the null it was
            if not (error["type"] == "missing" and _location(error) in null_paths)
        ]
    if problems:
        raise invalid_argument(
            "Invalid arguments: " + "; ".join(problems), details={"problems": problems}
        )
    return parsed


def _null_paths(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, dict):
        paths: list[str] = []
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            paths += [path] if item is None else _null_paths(item, path)
        return paths
    if isinstance(value, list):
        return [
            p for index, item in enumerate(value) for p in _null_paths(item, f"{prefix}.{index}")
        ]
    return []


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _location(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"])


MAX_LOCATION = 64  # field names come from the caller: never echo an unbounded one


def _describe(error: Any) -> str:
    location = (_location(error) or "arguments")[:MAX_LOCATION]
    message = str(error["msg"])
    if error["type"] == "extra_forbidden":
        message = "unknown field; remove it"
    elif error["type"] == "string_pattern_mismatch":
        message = f"must match {error['ctx']['pattern']}"
    message = message.removeprefix("Value error, ")
    return f"{location}: {message}"


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A self-contained JSON schema for a strict input model.

    ``$ref``s are inlined (several MCP clients handle them badly), every object
    gets ``additionalProperties: false``, and the ``null`` branch pydantic adds
    for optional fields is dropped, because null is refused (see StrictInput).
    """
    schema = model.model_json_schema(mode="validation")
    tidied: dict[str, Any] = _tidy(schema, schema.pop("$defs", {}), strict_input=True)
    return tidied


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A self-contained JSON schema of what a model serialises to (nulls kept)."""
    schema = model.model_json_schema(mode="serialization")
    tidied: dict[str, Any] = _tidy(schema, schema.pop("$defs", {}), strict_input=False)
    return tidied


def _tidy(node: Any, definitions: dict[str, Any], *, strict_input: bool) -> Any:
    if isinstance(node, list):
        return [_tidy(item, definitions, strict_input=strict_input) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(definitions[node["$ref"].rsplit("/", 1)[-1]])
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _tidy(merged, definitions, strict_input=strict_input)
    result = {
        key: _tidy(value, definitions, strict_input=strict_input)
        for key, value in node.items()
        if key != "title" or not isinstance(value, str)
    }
    if strict_input:
        branches = result.get("anyOf")
        if isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
            del result["anyOf"]
            result.update(next(b for b in branches if b != {"type": "null"}))
            if "default" in result and result["default"] is None:
                del result["default"]
        if result.get("type") == "object" and "properties" in result:
            result.setdefault("additionalProperties", False)
    return result
