"""From an OpenAPI document to the gateway file's ``http:`` entry for chosen operations.

``draftgate gateway import-openapi`` (issue 11, part 3) calls ``declaration_text``: each
chosen operation becomes an action (GET → read, anything else → write, unless told), its
input schema made of the operation's path and query parameters and its JSON request body,
with every ``$ref`` inlined and OpenAPI 3.0 idioms (``nullable``, boolean exclusive bounds)
turned into the JSON Schema the gateway accepts. What cannot be known from a document is
written as a placeholder an operator must read: a summary template naming the arguments, a
money path only when it is obvious (else a commented hint), fields that look like personal
data masked. The result is checked by the same code the gateway starts with, so it loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit

import yaml

from service.gateway import naming
from service.gateway.errors import GatewayError
from service.gateway.openapi_schemas import Resolver, leaves, plain, schema_type
from service.registry.loader import MAX_ACTION_NAME
from service.text import is_unsafe

Kind = Literal["read", "write"]
METHODS = ("get", "put", "post", "delete", "patch")
IDEMPOTENCY_HEADER = "idempotency-key"  # draftgate sends it on every execute
PERSONAL = re.compile(
    r"(e_?mail|phone|address|street|postcode|zip|birth|ssn|iban|card"
    r"|(customer|first|last|full|given|family)_?name)",
    re.I,
)
# What the gateway file may list per action (service.gateway.http: response_fields); a
# description that documents more (GitHub's issue has 391 leaves) is cut by one stated rule,
# shallowest fields first, in the document's order, so the file loads and says what it left.
MAX_RESPONSE_FIELDS = 50
MINOR_AMOUNT = re.compile(r"^(amount_?(minor|cents)|.*_(cents|minor))$", re.I)
MAJOR_AMOUNT = re.compile(r"^(amount|price|total)$", re.I)


@dataclass(frozen=True)
class Operation:
    operation_id: str
    method: str
    path: str
    spec: dict[str, Any]
    shared_parameters: list[Any] = field(default_factory=list)


def declaration_text(
    document: Mapping[str, Any],
    operation_ids: Iterable[str],
    *,
    kinds: Mapping[str, Kind] | None = None,
    namespace: str | None = None,
    base_url: str | None = None,
    source: str = "the OpenAPI document",
    source_url: str | None = None,
) -> str:
    """The gateway file (YAML with comments) for the chosen operations; GatewayError when
    an operation is unknown or its schema cannot be made strict."""
    if not isinstance(document, Mapping) or not isinstance(document.get("paths"), Mapping):
        raise GatewayError(f"{source}: not an OpenAPI document (no paths)")
    chosen = list(dict.fromkeys(operation_ids))
    if not chosen:
        raise GatewayError("name at least one operation (--operation OPERATION_ID)")
    kinds = dict(kinds or {})
    operations = _operations(document)
    unknown = [op for op in [*chosen, *kinds] if op not in operations]
    if unknown:
        known = ", ".join(sorted(operations)[:40]) or "none"
        raise GatewayError(f"{source}: no operation {unknown[0]!r} (operations: {known})")
    namespace = namespace or _namespace(document)
    url = base_url or _base_url(document, source_url)
    resolver = Resolver(document, source)
    names = _action_keys(namespace, chosen)
    blocks: dict[str, _Block] = {}
    for operation_id in chosen:
        operation = operations[operation_id]
        kind = kinds.get(operation_id) or ("read" if operation.method == "get" else "write")
        blocks[names[operation_id]] = _action(operation, kind, resolver)
    text = _render(document, namespace, url, blocks, source, from_document=base_url is None)
    _check(text)
    return text


# --- finding operations --------------------------------------------------------------------


def _operations(document: Mapping[str, Any]) -> dict[str, Operation]:
    found: dict[str, Operation] = {}
    for path, item in document["paths"].items():
        if not isinstance(item, Mapping):
            continue
        shared = item.get("parameters") or []
        for method in METHODS:
            spec = item.get(method)
            if isinstance(spec, Mapping) and isinstance(spec.get("operationId"), str):
                found[spec["operationId"]] = Operation(
                    spec["operationId"], method, str(path), dict(spec), list(shared)
                )
    return found


def _namespace(document: Mapping[str, Any]) -> str:
    title = str((document.get("info") or {}).get("title") or "")
    words = re.sub(r"[^a-z0-9]+", "", title.lower().replace(" api", ""))
    words = re.sub(r"^[0-9]+", "", words)[:21]
    return words if len(words) >= 2 else "api"


def _base_url(document: Mapping[str, Any], source_url: str | None) -> str:
    servers = document.get("servers") or []
    server = str(servers[0].get("url", "")) if servers and isinstance(servers[0], dict) else ""
    if urlsplit(server).scheme in ("http", "https"):
        return server.rstrip("/")
    if source_url is not None:  # a relative server (or none) is relative to the document
        return urljoin(source_url, server or "/").rstrip("/")
    return "http://127.0.0.1:8000"  # a placeholder the operator must replace (said so)


def _action_keys(namespace: str, operation_ids: list[str]) -> dict[str, str]:
    """Snake-case keys whose action names (``service.gateway.naming``) fit and differ."""
    room = MAX_ACTION_NAME - len(namespace) - 1
    keys: dict[str, str] = {}
    for operation_id in operation_ids:
        key = re.sub(r"[^a-z0-9]+", "_", naming.mapped(operation_id)).strip("_")
        key = re.sub(r"^[0-9_]+", "", key) or "operation"
        key = key[:room].rstrip("_")
        candidate, number = key, 2
        while candidate in keys.values():
            suffix = f"_{number}"
            candidate, number = key[: room - len(suffix)] + suffix, number + 1
        keys[operation_id] = candidate
    return keys


# --- one action ------------------------------------------------------------------------------


@dataclass
class _Block:
    declaration: dict[str, Any]
    hints: list[str]
    authenticated: bool = False


@dataclass
class _Arguments:
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    query: dict[str, str] = field(default_factory=dict)
    hints: list[str] = field(default_factory=list)
    authenticated: bool = False


def _parameters(operation: Operation, resolver: Resolver) -> _Arguments:
    """Path and query parameters as arguments (the operation's own override shared ones)."""
    found = _Arguments()
    for raw in [*operation.shared_parameters, *(operation.spec.get("parameters") or [])]:
        parameter = resolver.deref(raw)
        if not isinstance(parameter, Mapping):
            continue
        name, place = str(parameter.get("name", "")), parameter.get("in")
        if place == "header" and name.lower() == IDEMPOTENCY_HEADER:
            continue  # draftgate sends <draft_id>:<revision> in it on every execute
        if place == "header" and name.lower() == "authorization":
            found.authenticated = True  # a credential: the service's headers, from a secret
            continue
        if place not in ("path", "query"):
            found.hints.append(
                f"the {place!r} parameter {name!r} is not passed (set headers by hand)"
            )
            continue
        schema = resolver.schema(parameter.get("schema") or {"type": "string"})
        if parameter.get("description") and isinstance(schema, dict):
            schema.setdefault("description", parameter["description"])
        found.properties[name] = schema
        if place == "path" or parameter.get("required"):
            found.required.append(name)
        if place == "query":
            found.query[name] = "{" + name + "}"
    return found


def _action(operation: Operation, kind: Kind, resolver: Resolver) -> _Block:
    spec = operation.spec
    where = f"operation {operation.operation_id}"
    narrowed = len(resolver.narrowed)
    arguments = _parameters(operation, resolver)
    properties, required, query, hints = (
        arguments.properties,
        arguments.required,
        arguments.query,
        arguments.hints,
    )
    body = _request_body(spec, resolver, properties, required, where=where)
    declaration: dict[str, Any] = {"kind": kind}
    title = re.sub(r"\s+", " ", str(spec.get("summary") or "")).strip()
    if title:
        declaration["title"] = title[:200]
    declaration |= {
        "description": _description(operation),
        "input": {
            "type": "object",
            "properties": properties,
            "required": list(dict.fromkeys(required)),
        },
        "request": {"method": operation.method.upper(), "path": operation.path},
    }
    if not declaration["input"]["required"]:
        del declaration["input"]["required"]
    if query:
        declaration["request"]["query"] = query
    if body is not None:
        declaration["request"]["body"] = body
    documented = _response_fields(spec, resolver)
    fields = shallowest(documented, MAX_RESPONSE_FIELDS)
    personal = [f for f in fields if PERSONAL.search(f.split(".")[-1].split("[")[0])]
    if kind == "read" or fields:
        declaration["response_fields"] = fields
        hints.append(_fields_hint(fields, documented))
    if personal:
        declaration["mask"] = personal
        hints.append("mask: fields that look like personal data; adjust to what is")
    if kind == "write":
        money, money_hint = _money(properties)
        declaration["summary"] = _summary(operation, properties, required, money)
        declaration["risk"] = "high" if operation.method == "delete" else "medium"
        if money is not None:
            declaration["money"] = money
        else:
            hints.append(money_hint)
        hints.append("summary: what an approver reads and signs over; say what the change does")
    hints += [
        f"input: {note}; check it is the one to offer" for note in resolver.narrowed[narrowed:]
    ]
    return _Block(declaration, hints, arguments.authenticated)


def _description(operation: Operation) -> str:
    """The operation's summary and description as one text for the model."""
    spec = operation.spec
    summary, description = (
        re.sub(r"\s+", " ", str(spec.get(key) or "")).strip() for key in ("summary", "description")
    )
    if summary and description and not summary.endswith((".", "!", "?", ":")):
        summary += "."
    said = " ".join(part for part in (summary, description) if part)
    return (said or f"{operation.method.upper()} {operation.path}")[:3900]


def _request_body(
    spec: Mapping[str, Any],
    resolver: Resolver,
    properties: dict[str, Any],
    required: list[str],
    *,
    where: str,
) -> Any:
    """The body mapping, with the body's arguments added to the input; None without a body."""
    body = resolver.deref(spec.get("requestBody"))
    if not isinstance(body, Mapping):
        return None
    content = body.get("content") or {}
    media = next((m for m in content if m.split(";")[0].strip().endswith("json")), None)
    if media is None:
        raise GatewayError(f"{where}: the request body is not JSON ({', '.join(content)})")
    schema = resolver.schema((content[media] or {}).get("schema") or {})
    members = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(members, Mapping) or schema.get("type", "object") != "object":
        properties["body"] = schema
        if body.get("required"):
            required.append("body")
        return "{body}"
    mapping: dict[str, str] = {}
    for name, member in members.items():
        argument = name if name not in properties else f"body_{name}"
        properties[argument] = member
        mapping[name] = "{" + argument + "}"
        if name in (schema.get("required") or []):
            required.append(argument)
    return mapping


def _fields_hint(fields: list[str], documented: list[str]) -> str:
    if not fields:
        return "the documented response has no fields: list what the agent may see"
    if len(fields) == len(documented):
        return "response_fields: every field the API documents; keep only what the agent needs"
    return (
        f"response_fields: the {len(fields)} shallowest of the {len(documented)} fields the API "
        f"documents (at most {MAX_RESPONSE_FIELDS}); keep only what the agent needs, add what "
        "it lacks"
    )


def shallowest(fields: list[str], limit: int) -> list[str]:
    """At most ``limit`` of ``fields``: the shallowest first (fewest ``.`` and ``[*]``), each
    depth in the document's order; the kept ones stay in the document's order."""
    depth = {field: field.count(".") + field.count("[*]") for field in fields}
    kept = set(sorted(fields, key=lambda f: (depth[f], fields.index(f)))[:limit])
    return [field for field in fields if field in kept]


def _response_fields(spec: Mapping[str, Any], resolver: Resolver) -> list[str]:
    responses = spec.get("responses") or {}
    for status, raw in sorted(responses.items(), key=lambda item: str(item[0])):
        if not str(status).startswith("2"):
            continue
        response = resolver.deref(raw)
        content = (response.get("content") if isinstance(response, Mapping) else None) or {}
        media = next((m for m in content if m.split(";")[0].strip().endswith("json")), None)
        if media is None:
            continue
        schema = resolver.schema((content[media] or {}).get("schema") or {}, request=False)
        if (
            isinstance(schema, dict) and schema_type(schema) == "array"
        ):  # answered as {items: [...]}
            return leaves({"type": "object", "properties": {"items": schema}}, "", depth=0)
        if isinstance(schema, dict):
            return leaves(schema, "", depth=0)
    return []


def _money(properties: Mapping[str, Any]) -> tuple[dict[str, str] | None, str]:
    """A money path when one is obvious: exactly one minor-unit integer (or one decimal
    ``amount``) beside a ``currency`` string; otherwise the hint to write one."""
    hint = (
        "money: where the amount is, so amount policies apply, e.g. "
        "{amount_minor: <integer field>, currency: <field or ISO code>}"
    )
    currency = "currency" if schema_type(properties.get("currency")) == "string" else None
    minor = [
        n
        for n, s in properties.items()
        if schema_type(s) == "integer"
        and (MINOR_AMOUNT.match(n) or (MAJOR_AMOUNT.match(n) and _says_minor_units(s)))
    ]
    major = [
        n for n, s in properties.items() if MAJOR_AMOUNT.match(n) and schema_type(s) == "number"
    ]
    if currency and len(minor) == 1 and not major:
        return {"amount_minor": minor[0], "currency": currency}, hint
    if currency and len(major) == 1 and not minor:
        return {"amount": major[0], "currency": currency}, hint
    return None, hint


def _says_minor_units(schema: Any) -> bool:
    """An integer amount documented as minor units (cents) is obviously that."""
    description = str(schema.get("description") or "") if isinstance(schema, Mapping) else ""
    return re.search(r"minor unit|cents", description, re.I) is not None


def _summary(
    operation: Operation,
    properties: Mapping[str, Any],
    required: list[str],
    money: dict[str, str] | None,
) -> str:
    """A valid placeholder: the operation's own words, then its required scalar arguments."""
    said = str(operation.spec.get("summary") or "").strip() or operation.operation_id
    said = re.sub(r"\s+", " ", said)[:200].replace("{", "{{").replace("}", "}}")
    parts: list[str] = []
    if money is not None and "amount_minor" in money:
        parts.append(f"{{{money['amount_minor']}|money:{money['currency']}}}")
    shown = [
        name
        for name in dict.fromkeys(required)
        if plain(name)
        and schema_type(properties.get(name)) in ("string", "integer", "number", "boolean")
        and (money is None or name not in money.values())
    ]
    parts += [f"{name} {{{name}}}" for name in shown[:4]]
    return f"{said}: {', '.join(parts)}" if parts else said


# --- writing the file ------------------------------------------------------------------------


def _render(
    document: Mapping[str, Any],
    namespace: str,
    url: str,
    blocks: dict[str, _Block],
    source: str,
    *,
    from_document: bool = False,
) -> str:
    info = document.get("info") or {}
    title = re.sub(r"\s+", " ", str(info.get("title") or "an API"))[:100]
    lines = [
        f"# Generated by `draftgate gateway import-openapi` from {_comment(source)}",
        f"# ({_comment(title)} {_comment(str(info.get('version') or ''))}).",
        "# Read every action before serving it: its kind, the summary approvers sign over,",
        "# the response fields agents see and what is masked. Then: draftgate gateway check",
        "version: 1",
        "http:",
        f"  - namespace: {namespace}",
        f"    base_url: {_scalar(url)}",
    ]
    if url == "http://127.0.0.1:8000" and not document.get("servers"):
        lines.append("    # the document names no server: replace base_url with the API's URL")
    elif from_document:  # whoever wrote the document chose where the credential goes
        lines.append(
            "    # base_url is the document's servers[0]: every request, with the headers "
            "below (the token), is sent there; check it is the API's real address"
        )
    schemes = ((document.get("components") or {}).get("securitySchemes")) or {}
    if schemes or any(block.authenticated for block in blocks.values()):
        variable = f"{namespace.upper()}_TOKEN"
        lines.append(
            f'    # headers: {{Authorization: {{env: {variable}, prefix: "Bearer "}}}}'
            "  # the API declares authentication"
        )
    lines += ["    timeout_seconds: 10", "    actions:"]
    for key, block in blocks.items():
        dumped = yaml.safe_dump(
            {key: block.declaration}, sort_keys=False, allow_unicode=True, width=96
        )
        lines += ["      " + line for line in dumped.rstrip("\n").splitlines()]
        lines += [f"        # {_comment(hint)}" for hint in block.hints]
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    # Every character service.text calls unsafe, which includes each one YAML reads as a
    # line break (\x85, U+2028, U+2029): a document's text must not end the comment.
    return "".join(" " if is_unsafe(c) else c for c in text)


def _scalar(text: str) -> str:
    return yaml.safe_dump(text, default_style=None).removesuffix("\n...\n").strip()


def _check(text: str) -> None:
    """Load what was written as the gateway will, so a schema it refuses fails the import
    here, naming the action, rather than at the operator's first start."""
    from service.gateway.build import build_declared  # the kinds' modules: only when used
    from service.gateway.config import parse_gateway_text

    generated = parse_gateway_text(text, name="the generated declaration")
    if any(entry.section != "http" for entry, _ in generated.entries):
        # only http: is written; anything else came from the document's text
        raise GatewayError("the generated declaration holds an mcp: entry; it was not written")
    problems = build_declared(generated).problems
    if problems:
        raise GatewayError(*problems)
