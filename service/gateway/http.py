"""Upstream kind: a REST API's operations, declared in the gateway file (``http:``).

Each declared operation becomes an action (``http_actions``); building it checks its input
schema, its request's placeholders against that schema, and its write declaration.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from service.gateway import http_requests as requests
from service.gateway.actions import declared_action
from service.gateway.declarations import (
    Declared,
    ToolDeclaration,
    UpstreamDeclaration,
    Value,
    check_url,
    declared_values,
    resolve_values,
)
from service.gateway.errors import GatewayError
from service.gateway.http_actions import HttpRead, HttpWrite, Operation, output_model
from service.gateway.kinds import Build, DeclaredTool, UpstreamKind
from service.gateway.paths import parse_path
from service.gateway.schema import strict_model
from service.gateway.where import Where
from service.registry.base import Action
from service.validation import StrictInput, input_schema

# Headers draftgate sets itself: a declaration may not replace them.
OWN_HEADERS = frozenset({"idempotency-key", "content-type", "content-length", "host"})
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
STATUS_LISTS = ("success", "business_failure", "transient")


class HttpRequest(Declared):
    """The request an action makes. ``{name}`` placeholders take the validated arguments:
    in the path percent-encoded, in query values and the body as text, and a string that is
    ``"{name}"`` alone in the body keeps the argument's JSON type. ``{{``/``}}`` are braces."""

    method: Method
    path: str = Field(pattern=r"^/", max_length=2048)
    query: dict[str, str] = Field(default_factory=dict, max_length=50)
    body: Any = None

    @field_validator("path")
    @classmethod
    def _path(cls, path: str) -> str:
        if "?" in path or "#" in path:
            raise ValueError("the path has no query or fragment; declare query values in query")
        _check_placeholders(path)
        return path

    @field_validator("query")
    @classmethod
    def _query(cls, query: dict[str, str]) -> dict[str, str]:
        for value in query.values():
            _check_placeholders(value)
        return query

    @field_validator("body")
    @classmethod
    def _body(cls, body: Any) -> Any:
        for text in _strings(body):
            _check_placeholders(text)
        return body


class HttpAction(ToolDeclaration):
    """One operation of the API, declared as a read or a write."""

    description: str = Field(min_length=1, max_length=4000)  # no upstream to take it from
    input: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    request: HttpRequest
    response_fields: list[str] | None = Field(default=None, max_length=200)
    success: list[int] | None = None
    business_failure: list[int] | None = None
    transient: list[int] | None = None

    @field_validator("response_fields")
    @classmethod
    def _paths(cls, paths: list[str] | None) -> list[str] | None:
        for path in paths or []:
            parse_path(path)
        return paths

    @field_validator("success", "business_failure", "transient")
    @classmethod
    def _statuses(cls, statuses: list[int] | None) -> list[int] | None:
        for status in statuses or []:
            if not 100 <= status <= 599:
                raise ValueError(f"{status} is not an HTTP status")
        return statuses

    @model_validator(mode="after")
    def _http(self) -> HttpAction:
        lists = [set(getattr(self, name) or []) for name in STATUS_LISTS]
        shared = sorted(set().union(*(a & b for i, a in enumerate(lists) for b in lists[i + 1 :])))
        if shared:
            raise ValueError(f"status {shared[0]} is in more than one of the status lists")
        if self.kind == "read":
            if self.request.method != "GET":  # a read is made whenever an agent asks
                raise ValueError(
                    f"a read action must be a GET request, not {self.request.method} "
                    "(declare it kind: write, so a human approves it)"
                )
            if self.response_fields is None:
                raise ValueError(
                    "a read action needs response_fields: the allow-list of what the agent sees"
                )
        return self

    def rules(self) -> requests.StatusRules:
        return requests.StatusRules(
            success=None if self.success is None else frozenset(self.success),
            business_failure=frozenset(self.business_failure or []),
            transient=frozenset(self.transient or []),
        )


class HttpService(UpstreamDeclaration):
    """One REST API of the ``http:`` section of the gateway file."""

    section: ClassVar[str] = "http"
    tools_key: ClassVar[str] = "actions"
    # One request per execution, its one deadline covering connect, headers and body.
    calls_per_execution: ClassVar[int] = 1

    base_url: str = Field(max_length=2048)
    headers: dict[str, Value] = Field(default_factory=dict, max_length=50)
    actions: dict[str, HttpAction] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, url: str) -> str:
        check_url(url)
        if "?" in url or "#" in url:
            raise ValueError("the base URL has no query or fragment")
        return url

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, Value]) -> dict[str, Value]:
        for name in headers:
            if not requests.HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name")
            if name.lower() in OWN_HEADERS:
                raise ValueError(f"{name} is set by draftgate itself")
        return headers


def _check_placeholders(template: str) -> None:
    try:
        requests.placeholders(template)
    except requests.RequestProblem as exc:
        raise ValueError(str(exc)) from None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def build_http(service: HttpService, build: Build) -> None:
    """The actions of one declared REST API, checked against their input schemas.

    Secrets are resolved once here, so a missing one stops the start (GatewayError naming
    the reference, never a value), and again for every request, so a rotated file is used.
    """
    try:
        resolve_values(service.headers, where=build.where / "headers")
    except GatewayError as exc:
        build.refuse(exc)
    for tool in build.tools(service):
        try:
            build.add(_action(service, tool, build))
        except GatewayError as exc:
            build.refuse(exc)


def _action(service: HttpService, tool: DeclaredTool, build: Build) -> Action:
    declared = service.actions[tool.key]
    model = strict_model(tool.name, declared.input, where=str(tool.where / "input"))
    _check_request(declared.request, model, where=tool.where / "request")
    attributes: dict[str, Any] = {"upstream": Operation(service, tool.key, declared)}
    if declared.kind == "read":
        attributes["Output"] = output_model(tool.name, declared.response_fields or [])
    return declared_action(
        (HttpRead, HttpWrite),
        build,
        tool,
        model,
        title=declared.title or tool.key.replace("_", " ").capitalize(),
        description=declared.description,
        # Where the request goes and what it sends, secrets as references.
        reached={
            "base_url": service.base_url,
            "headers": declared_values(service.headers),
            "request": declared.request.model_dump(mode="json"),
        },
        attributes=attributes,
    )


def _check_request(request: HttpRequest, model: type[StrictInput], *, where: Where) -> None:
    """Every placeholder names an argument; path ones a required scalar, text ones a scalar."""
    schema = input_schema(model)
    for name in requests.placeholders(request.path):
        _argument_schema(schema, name, where=where / "path", required=True, scalar=True)
    for query_name, template in request.query.items():
        whole = requests.whole_placeholder(template)
        for name in requests.placeholders(template):
            _argument_schema(schema, name, where=where / "query" / query_name, scalar=whole is None)
    for text in _strings(request.body):
        whole = requests.whole_placeholder(text)
        for name in requests.placeholders(text):
            _argument_schema(schema, name, where=where / "body", scalar=whole is None)


SCALARS = frozenset({"string", "integer", "number", "boolean"})


def _argument_schema(
    schema: dict[str, Any], path: str, *, where: Where, required: bool = False, scalar: bool = False
) -> None:
    node = schema
    for part in path.split("."):
        properties = node.get("properties", {})
        if part not in properties:
            raise where.error(f"{{{path}}} names no argument of the input schema")
        if required and part not in node.get("required", []):
            raise where.error(f"{{{path}}} must be a required argument (a URL path has no gaps)")
        node = _non_null(properties[part])
    if scalar and node.get("type") not in SCALARS and "enum" not in node and "const" not in node:
        raise where.error(f"{{{path}}} is not text, a number or a boolean")


def _non_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    return options[0] if len(options) == 1 and isinstance(options[0], dict) else schema


KINDS = [UpstreamKind(HttpService, build_http)]
