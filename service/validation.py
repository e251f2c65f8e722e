"""Strict validation of untrusted arguments (DESIGN.md §3, input hardening).

Arguments from a model are parsed as JSON in pydantic's strict mode: no
coercion ("12" is not 12, true is not 1) and unknown fields refused. An
explicit ``null`` means exactly "omitted" (DESIGN.md §3): strict-mode clients
send every field, with null for the ones the model does not use. Size and
nesting depth are bounded before any model sees the value.
"""

from __future__ import annotations

import copy
import json
import unicodedata
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator

from service.errors import invalid_argument
from service.text import first_unsafe, inert

ModelT = TypeVar("ModelT", bound=BaseModel)


class StrictInput(BaseModel):
    """Base of every model that parses untrusted input."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_omitted(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


def _safe_text(value: str) -> str:
    value = unicodedata.normalize("NFC", value.replace("\r\n", "\n"))
    found = first_unsafe(value, multiline=True)
    if found:
        raise ValueError(
            f"contains {found}, a control or invisible formatting character; send plain text "
            "(line feeds and tabs are allowed)"
        )
    return value


def _safe_line(value: str) -> str:
    value = unicodedata.normalize("NFC", value)
    found = first_unsafe(value)
    if found:
        raise ValueError(
            f"contains {found}, a control or invisible formatting character; send one line "
            "of plain text"
        )
    return value


def _safe_signed_text(value: str) -> str:
    # Signed bytes cannot be normalised after signing: refuse what is not already NFC, and
    # a carriage return (the signer sends line feeds only).
    found = first_unsafe(value, multiline=True)
    if found:
        raise ValueError(
            f"contains {found}, a control or invisible formatting character; send plain text "
            "(line feeds and tabs are allowed)"
        )
    if not unicodedata.is_normalized("NFC", value):
        raise ValueError("is not in Unicode normal form C; normalise it before signing")
    return value


# Free text from an agent (or anyone): notes, reasons, descriptions, an upstream's strings.
# CRLF becomes LF, NFC-normalised; line feeds and tabs are allowed (DESIGN.md §3: renderers
# frame multi-line values), every other character that could hide or fake what an approver
# reads is refused.
SafeText = Annotated[str, AfterValidator(_safe_text)]
# One line: a name, a label, an address part. The same refusals, and no line feed or tab.
SafeLine = Annotated[str, AfterValidator(_safe_line)]
# Free text inside a signed statement, which is refused rather than normalised.
SignedText = Annotated[str, AfterValidator(_safe_signed_text)]


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
    compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    size = len(compact.encode(errors="surrogatepass"))  # a lone surrogate is refused later
    if size > max_bytes:
        raise invalid_argument(
            f"Arguments are too large ({size} bytes; at most {max_bytes}).",
            details={"max_bytes": max_bytes},
        )


def load_json(raw: bytes, *, max_bytes: int, max_depth: int) -> Any:
    """Parse an untrusted JSON document within bounds, or raise INVALID_ARGUMENT.

    The size is checked before parsing; a document nested deeper than the parser's own
    recursion limit is refused, not allowed to crash the request; the depth is checked after.
    """
    if len(raw) > max_bytes:
        raise invalid_argument(
            f"The body is too large ({len(raw)} bytes; at most {max_bytes}).",
            details={"max_bytes": max_bytes},
        )
    try:
        value = json.loads(raw, object_pairs_hook=_unique_members)
    except RecursionError:
        value = None
        depth_exceeded = True
    except _DuplicateMember as duplicate:
        raise invalid_argument(
            f"The body names the member {duplicate.name!r} more than once.",
            details={"duplicate_member": duplicate.name},
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise invalid_argument("The body is not valid JSON.") from None
    else:
        depth_exceeded = _depth(value, limit=max_depth) > max_depth
    if depth_exceeded:
        raise invalid_argument(
            f"The body is nested too deeply (more than {max_depth} levels).",
            details={"max_depth": max_depth},
        )
    return value


class _DuplicateMember(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = inert(name[:MAX_LOCATION])


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refused if a name repeats: parsers disagree on which value wins (RFC 7493
    §2.3), so a body could say one thing to the server and another to whoever reviews it."""
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise _DuplicateMember(name)
        members[name] = value
    return members


def _depth(value: Any, *, limit: int) -> int:
    """Nesting depth of containers (a flat object is 1), counted no further than limit + 1."""
    if not isinstance(value, dict | list):
        return 0
    if limit < 0:  # stop early: the exact depth of a hostile value does not matter
        return 1
    children = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(child, limit=limit - 1) for child in children), default=0)


def parse(model: type[ModelT], arguments: dict[str, Any]) -> ModelT:
    """Validate arguments against a strict model, or raise INVALID_ARGUMENT naming every problem."""
    surrogates = [
        f"{path[:MAX_LOCATION]}: contains a lone surrogate (U+D800-U+DFFF), which is not text"
        for path in _surrogate_paths(arguments)
    ]
    if surrogates:  # not even JSON a parser accepts: say where, rather than "invalid JSON"
        raise invalid_argument(
            "Invalid arguments: " + "; ".join(surrogates), details={"problems": surrogates}
        )
    try:
        return model.model_validate_json(json.dumps(arguments))
    except ValidationError as exc:
        null_paths = set(_null_paths(arguments))
        problems = [_describe(error, null_paths) for error in exc.errors(include_url=False)]
    raise invalid_argument(
        "Invalid arguments: " + "; ".join(problems), details={"problems": problems}
    )


def _surrogate_paths(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, str):
        return [prefix or "arguments"] if any(0xD800 <= ord(c) <= 0xDFFF for c in value) else []
    if isinstance(value, dict):
        return [
            p
            for key, item in value.items()
            for p in _surrogate_paths(item, f"{prefix}.{key}" if prefix else str(key))
        ]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _surrogate_paths(item, f"{prefix}.{i}")]
    return []


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


def _location(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"])


MAX_LOCATION = 64  # field names come from the caller: never echo an unbounded one


def _describe(error: Any, null_paths: set[str]) -> str:
    location = (_location(error) or "arguments")[:MAX_LOCATION]
    message = str(error["msg"])
    if error["type"] == "missing" and _location(error) in null_paths:
        message = "required; null means omitted, so send a value"
    elif error["type"] == "extra_forbidden":
        message = "unknown field; remove it"
    elif error["type"] == "string_pattern_mismatch":
        message = f"must match {error['ctx']['pattern']}"
    elif error["type"] in ("too_long", "too_short") and isinstance(error.get("input"), str):
        # A string's length is in characters (a SafeText is checked after normalising, where
        # pydantic says "items"); the words must say so.
        ctx = error.get("ctx") or {}
        bound = "at most" if error["type"] == "too_long" else "at least"
        limit = ctx.get("max_length" if error["type"] == "too_long" else "min_length")
        unit = "character" if limit == 1 else "characters"
        message = f"{bound} {limit} {unit}, not {len(error['input'])}"
    message = message.removeprefix("Value error, ")
    return f"{location}: {message}"


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A self-contained JSON schema for a strict input model, ready for strict-mode clients.

    ``$ref``s are inlined (several MCP clients handle them badly, and OpenAI's strict
    mode refuses a bare one), every object gets ``additionalProperties: false``, and
    every optional field is published nullable, since null means omitted (StrictInput):
    a client that makes every field required can still leave one unused.
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
        # No published defaults: strict conversion (OpenAI's) keeps "default" beside a field
        # it makes required, and models copy it. The server applies its own default; the
        # description says what it is. (null is omission, not a value to default to.)
        default = result.pop("default", None)
        if default is not None:
            shown, described = json.dumps(default), result.get("description", "")
            if f"Default: {shown}" not in described:
                result["description"] = f"{described} Default: {shown}.".lstrip()
        if result.get("type") == "object" and "properties" in result:
            result.setdefault("additionalProperties", False)
            required = set(result.get("required", []))
            result["properties"] = {
                name: prop if name in required else _nullable(prop)
                for name, prop in result["properties"].items()
            }
    return result


NULL = {"type": "null"}
# Annotations that describe the field rather than constrain its value stay outside anyOf.
_OUTSIDE = ("description", "default", "examples")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or null: optional fields accept null as "omitted"."""
    if NULL in schema.get("anyOf", []):
        return schema
    inner = {k: v for k, v in schema.items() if k not in _OUTSIDE}
    outer = {k: v for k, v in schema.items() if k in _OUTSIDE}
    return {"anyOf": [inner, NULL], **outer}
