"""Summary templates: the sentence an approver signs over, filled from a draft's params.

``"Refund {amount_cents|money:currency} on invoice {invoice_id}"`` — placeholders name a
path into the params (dotted, ``[n]`` for a list item) with an optional filter: ``count``
(the length of a list or object) or ``money:<currency path or ISO code>`` (an integer
amount in minor units, rendered with the currency's ISO 4217 exponent). ``{{`` and ``}}``
are literal braces. There is no attribute access, no format spec and no code: a template is
checked against the action's input schema when the gateway starts, and every value is
rendered inert (``service.text.inert``), since the agent chose it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from service.errors import invalid_argument
from service.gateway.errors import GatewayError
from service.gateway.paths import lookup
from service.money import currency_exponent, render_amount
from service.text import inert
from service.validation import input_schema

MAX_SUMMARY = 1000  # characters of a rendered summary; a long list does not flood the screen
MAX_VALUE = 200  # characters of one rendered value
_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,63})|\[(\d{1,4})\]")
_CURRENCY_CODE = re.compile(r"[A-Z]{3}")
MISSING = "(none)"


@dataclass(frozen=True)
class Placeholder:
    path: tuple[str | int, ...]
    filter: str | None = None  # None, "count" or "money"
    currency_path: tuple[str | int, ...] | None = None
    currency_code: str | None = None


@dataclass(frozen=True)
class Template:
    source: str
    parts: tuple[str | Placeholder, ...]

    def render(self, params: dict[str, Any]) -> str:
        """The summary for these (validated) params. A value the filter cannot take (a
        currency that is no ISO 4217 code) is the agent's error: INVALID_ARGUMENT."""
        text = "".join(
            part if isinstance(part, str) else _render(part, params) for part in self.parts
        )
        return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 1] + "…"


def parse_template(source: str, model: type[BaseModel], *, where: str) -> Template:
    """Parse ``source`` and check every placeholder against ``model``'s input schema."""
    schema = input_schema(model)
    parts: list[str | Placeholder] = []
    literal: list[str] = []
    index = 0
    while index < len(source):
        char = source[index]
        if source.startswith("{{", index) or source.startswith("}}", index):
            literal.append(char)
            index += 2
            continue
        if char == "}":
            raise GatewayError(f"{where}: a lone '}}' at {index} (write '}}}}' for a brace)")
        if char != "{":
            literal.append(char)
            index += 1
            continue
        end = source.find("}", index)
        if end < 0:
            raise GatewayError(f"{where}: an unclosed '{{' at {index}")
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(_placeholder(source[index + 1 : end], schema, where=where))
        index = end + 1
    if literal:
        parts.append("".join(literal))
    if not any(isinstance(part, Placeholder) for part in parts) and not source.strip():
        raise GatewayError(f"{where}: the summary template is empty")
    return Template(source, tuple(parts))


def _placeholder(body: str, schema: dict[str, Any], *, where: str) -> Placeholder:
    label = f"{where}: placeholder {{{body}}}"
    expression, _, filter_text = body.partition("|")
    path = _path(expression.strip(), label)
    target = _schema_at(schema, path, label)
    name, _, argument = filter_text.strip().partition(":")
    if not filter_text:
        if _kind(target) in ("object", "array"):
            raise GatewayError(f"{label}: a list or object cannot be shown; use |count")
        return Placeholder(path)
    if name == "count" and not argument:
        if _kind(target) not in ("object", "array"):
            raise GatewayError(f"{label}: |count needs a list or an object")
        return Placeholder(path, "count")
    if name == "money" and argument:
        if _kind(target) != "integer":
            raise GatewayError(f"{label}: |money needs an integer amount in minor units")
        argument = argument.strip()
        if _CURRENCY_CODE.fullmatch(argument):
            try:
                currency_exponent(argument)
            except ValueError as exc:
                raise GatewayError(f"{label}: {exc}") from None
            return Placeholder(path, "money", currency_code=argument)
        currency_path = _path(argument, label)
        if _kind(_schema_at(schema, currency_path, label)) != "string":
            raise GatewayError(f"{label}: the currency {argument!r} is not a string field")
        return Placeholder(path, "money", currency_path=currency_path)
    raise GatewayError(
        f"{label}: unknown filter {filter_text.strip()!r} (use |count or |money:<currency>)"
    )


def _path(expression: str, label: str) -> tuple[str | int, ...]:
    segments: list[str | int] = []
    for text in expression.split("."):
        if not text:
            raise GatewayError(f"{label}: the path {expression!r} has an empty segment")
        offset = 0
        while offset < len(text):
            match = _SEGMENT.match(text, offset)
            if match is None or (match.group(1) and offset):
                raise GatewayError(
                    f"{label}: {expression!r} is not a path (names, dots and [n] only)"
                )
            segments.append(match.group(1) if match.group(1) else int(match.group(2)))
            offset = match.end()
    if not segments or not isinstance(segments[0], str):
        raise GatewayError(f"{label}: a path starts with a field name")
    return tuple(segments)


def _unwrap(schema: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    return options[0] if len(options) == 1 else schema


def _kind(schema: dict[str, Any]) -> str | None:
    kind = _unwrap(schema).get("type")
    return kind if isinstance(kind, str) else None


def _schema_at(schema: dict[str, Any], path: tuple[str | int, ...], label: str) -> dict[str, Any]:
    node = schema
    for segment in path:
        node = _unwrap(node)
        if isinstance(segment, int):
            if node.get("type") != "array":
                raise GatewayError(f"{label}: [{segment}] applies to a list only")
            node = node.get("items", {})
        else:
            properties = node.get("properties", {}) if node.get("type") == "object" else {}
            if segment not in properties:
                raise GatewayError(f"{label}: the input has no field {segment!r}")
            node = properties[segment]
    return node


def _render(part: Placeholder, params: dict[str, Any]) -> str:
    value = lookup(params, part.path)
    if part.filter == "count":
        return str(len(value)) if isinstance(value, list | dict) else "0"
    if value is None:
        return MISSING
    if part.filter == "money":
        currency = part.currency_code or lookup(params, part.currency_path or ())
        try:
            if not isinstance(currency, str) or not isinstance(value, int):
                raise ValueError("no amount in a currency")
            return render_amount(value, currency)
        except ValueError as exc:
            raise invalid_argument(
                f"The amount cannot be shown: {inert(str(exc))[:MAX_VALUE]}"
            ) from None
    if isinstance(value, bool):
        return "true" if value else "false"
    text = inert(str(value))
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"
