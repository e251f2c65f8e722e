"""HTTP actions: a REST API's operations declared in the gateway file (issue 11, part 2).

Each declared operation becomes an action. A read calls the API when the agent asks and
answers with only the allow-listed fields of the response, masked where declared. A write
becomes a draft; after approval the worker makes the declared request, once per
``Idempotency-Key: <draft_id>:<revision>`` (the upstream dedupes on it, so a retry or a
redelivery after a crash cannot make the change twice), and the response's status decides
the outcome: success, a business failure (final, with the upstream's message, inert and
bounded) or transient (retried by the worker's backoff).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from service.errors import invalid_argument
from service.gateway import errors
from service.gateway import http_requests as requests
from service.gateway.declarations import (
    NAMESPACE_PATTERN,
    Declared,
    MoneyPath,
    Value,
    WriteContract,
    WriteDeclaration,
    declared_values,
    masked,
    parse_path,
    resolve_values,
)
from service.gateway.errors import GatewayError
from service.gateway.results import TooLarge, recordable, too_large_note
from service.gateway.schema import strict_model
from service.registry.base import (
    Action,
    ActionContext,
    Outcome,
    Preview,
    ReadAction,
    Risk,
    WriteAction,
)
from service.text import inert
from service.validation import StrictInput, input_schema

# Headers draftgate sets itself: a declaration may not replace them.
OWN_HEADERS = frozenset({"idempotency-key", "content-type", "content-length", "host"})
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


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


class HttpAction(Declared):
    """One operation of the API, declared as a read or a write."""

    kind: Literal["read", "write"]
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str = Field(min_length=1, max_length=4000)
    input: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    request: HttpRequest
    response_fields: list[str] | None = Field(default=None, max_length=200)
    mask: list[str] = Field(default_factory=list, max_length=100)
    success: list[int] | None = None
    business_failure: list[int] | None = None
    transient: list[int] | None = None
    # write only (see WriteDeclaration)
    summary: str | None = Field(default=None, min_length=1, max_length=500)
    risk: Risk = Risk.MEDIUM
    money: MoneyPath | None = None
    contract_version: int = Field(default=1, ge=1, le=1_000_000)

    @field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        return Risk(value) if value in {r.value for r in Risk} else value

    @field_validator("response_fields", "mask")
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
    def _by_kind(self) -> HttpAction:
        lists = {
            name: set(getattr(self, name) or [])
            for name in ("success", "business_failure", "transient")
        }
        shared = sorted(
            (lists["success"] & lists["business_failure"])
            | (lists["success"] & lists["transient"])
            | (lists["business_failure"] & lists["transient"])
        )
        if shared:
            raise ValueError(f"status {shared[0]} is in more than one of the status lists")
        if self.kind == "write" and self.summary is None:
            raise ValueError("a write action needs a summary template (what the approver reads)")
        if self.kind == "read":
            if self.request.method != "GET":  # a read is made whenever an agent asks
                raise ValueError(
                    f"a read action must be a GET request, not {self.request.method} "
                    "(declare it kind: write, so a human approves it)"
                )
            if self.summary is not None or self.money is not None:
                raise ValueError("a read action takes no summary or money")
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


class HttpService(Declared):
    """One REST API of the ``http:`` section of the gateway file."""

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    base_url: str = Field(max_length=2048)
    headers: dict[str, Value] = Field(default_factory=dict, max_length=50)
    timeout_seconds: float = Field(default=10, gt=0, le=300)
    actions: dict[str, HttpAction] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, url: str) -> str:
        from service.gateway.config import check_url  # config imports this module

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

    @field_validator("actions")
    @classmethod
    def _action_names(cls, actions: dict[str, HttpAction]) -> dict[str, HttpAction]:
        for name in actions:
            if not requests.ACTION_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not an action name (lower_snake_case)")
        return actions


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


# --- the actions -------------------------------------------------------------------------------


class _Upstream:
    """One declared operation of one service, checked against its input model."""

    def __init__(self, service: HttpService, key: str, declared: HttpAction) -> None:
        self.service = service
        self.key = key
        self.declared = declared
        self.rules = declared.rules()
        self.response_paths = [parse_path(p) for p in declared.response_fields or []]

    def request(self, arguments: Mapping[str, Any]) -> requests.Prepared:
        """The request for these arguments; INVALID_ARGUMENT if they cannot make a safe one."""
        try:
            return requests.prepare(
                base_url=self.service.base_url,
                method=self.declared.request.method,
                path=self.declared.request.path,
                query=self.declared.request.query,
                body=self.declared.request.body,
                arguments=arguments,
            )
        except requests.RequestProblem as exc:
            raise invalid_argument(f"The arguments cannot make the request: {exc}.") from None

    def call(self, arguments: Mapping[str, Any], *, idempotency_key: str | None) -> requests.Answer:
        """Make the request once: the answer when its status is a success, else the
        DomainError its status (or the lack of an answer) means."""
        prepared = self.request(arguments)
        namespace = self.service.namespace
        try:
            headers = resolve_values(dict(self.service.headers), where=f"http {namespace}")
        except GatewayError:  # it was there at start-up: an operator is rotating it
            raise errors.upstream_unavailable(namespace, "its credential is missing") from None
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        try:
            answer = requests.send(
                prepared, headers=headers, timeout_seconds=self.service.timeout_seconds
            )
        except requests.TransportFailure as exc:
            raise errors.upstream_unavailable(namespace, exc.problem) from None
        verdict = self.rules.verdict(answer.status)
        if verdict is requests.Verdict.TRANSIENT:
            said = answer.message()
            problem = f"HTTP {answer.status}" + (f": {said}" if said else "")
            raise errors.upstream_unavailable(namespace, problem)
        if verdict is requests.Verdict.FAILURE:
            said = answer.message() or _status_words(answer.status)
            raise errors.upstream_refused(namespace, self.key, f"HTTP {answer.status}: {said}")
        return answer

    def shown(self, body: Any) -> dict[str, Any]:
        """The allow-listed part of a JSON object answer, masked where declared."""
        kept = requests.project(body, self.response_paths)
        result = masked(kept, self.declared.mask)
        return result if isinstance(result, dict) else {}


def _status_words(status: int) -> str:
    if 300 <= status < 400:
        return "a redirect, which draftgate does not follow"
    return "no message"


class HttpRead(ReadAction):
    kind = "read"
    upstream: ClassVar[_Upstream]

    def masked(self, params: BaseModel) -> dict[str, Any]:
        # The arguments under their JSON names (the model's fields are aliases of them);
        # declared masks name response fields, which these are not.
        return _arguments(params)

    def handle(self, ctx: ActionContext, params: StrictInput) -> BaseModel:
        answer = self.upstream.call(_arguments(params), idempotency_key=None)
        body = _object(answer.json())
        if body is None:
            raise errors.upstream_refused(
                self.upstream.service.namespace,
                self.upstream.key,
                "the answer is not JSON (or is larger than draftgate relays)",
            )
        try:
            shown = recordable(self.upstream.shown(body))
        except TooLarge:
            raise errors.upstream_refused(
                self.upstream.service.namespace,
                self.upstream.key,
                "the answer is larger than draftgate relays",
            ) from None
        return self.Output.model_validate(shown)


class HttpWrite(WriteAction):
    kind = "write"
    upstream: ClassVar[_Upstream]
    contract: ClassVar[WriteContract]

    def masked(self, params: BaseModel) -> dict[str, Any]:
        return _arguments(params)

    def amount_of(self, params: Any) -> Any:
        return self.contract.amount_of(_arguments(params))

    def validate(self, ctx: ActionContext, params: StrictInput) -> Preview:
        arguments = _arguments(params)
        self.upstream.request(arguments)  # refuse now what could not be sent later
        return self.contract.preview(arguments)

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        # An API cannot be asked in general whether a change was made; sending the same
        # request with the same Idempotency-Key is how it is asked, and it dedupes.
        return None

    def execute(self, ctx: ActionContext, params: StrictInput, idempotency_key: str) -> Outcome:
        answer = self.upstream.call(_arguments(params), idempotency_key=idempotency_key)
        data: dict[str, Any] = {"http_status": answer.status}
        if self.upstream.response_paths:
            body = _object(answer.json())
            try:  # hashed into the audit chain: RFC 8785 JSON, bounded
                data["response"] = {} if body is None else recordable(self.upstream.shown(body))
            except TooLarge as exc:
                data["response"] = {"not_kept": too_large_note(exc.size)}
        return Outcome(
            summary=f"{self.title}: done (the upstream answered HTTP {answer.status}).", data=data
        )


def _object(body: Any) -> dict[str, Any] | None:
    """A JSON answer as an object: a list is seen as ``{"items": [...]}``; else None."""
    if isinstance(body, list):
        return {"items": body}
    return body if isinstance(body, dict) else None


def _arguments(params: BaseModel) -> dict[str, Any]:
    """The arguments under the upstream's own names, omitted ones left out."""
    return params.model_dump(mode="json", exclude_none=True, by_alias=True)


def http_actions(service: HttpService, *, where: str = "") -> list[Action]:
    """The actions of one declared REST API, checked against their input schemas.

    Secrets are resolved once here, so a missing one stops the start (GatewayError naming
    the reference, never a value), and again for every request, so a rotated file is used.
    """
    from service.gateway.build import PROPOSE_NOTE  # build loads this module lazily

    label = where or f"http {service.namespace}"
    resolve_values(dict(service.headers), where=f"{label}: headers")
    actions: list[Action] = []
    for key, declared in service.actions.items():
        name = f"{service.namespace}_{key}"
        at = f"{label}: actions.{key}"
        model = strict_model(name, declared.input, where=f"{at}.input")
        _check_request(declared.request, model, where=f"{at}.request")
        upstream = _Upstream(service, key, declared)
        attributes: dict[str, Any] = {
            "name": name,
            "contract_version": declared.contract_version,
            "title": inert(declared.title or _title(key))[:200],
            "description": inert(declared.description),
            "Input": model,
            "upstream": upstream,
        }
        if declared.kind == "read":
            attributes["Output"] = _output_model(name, declared.response_fields or [])
            actions.append(type(f"HttpRead_{name}", (HttpRead,), attributes)())
            continue
        assert declared.summary is not None
        write = WriteDeclaration(
            summary=declared.summary,
            risk=declared.risk,
            money=declared.money,
            contract_version=declared.contract_version,
        )
        attributes["contract"] = WriteContract(write, model, where=at)
        attributes["description"] = (PROPOSE_NOTE + attributes["description"])[:4000]
        # What an approval means beyond the input schema: where the request goes and what
        # it sends (service.gateway.build gives a changed one a new contract_version).
        attributes["declaration_fingerprint"] = {
            "base_url": service.base_url,
            "headers": declared_values(dict(service.headers)),  # secrets as references
            "request": declared.request.model_dump(mode="json"),
            **write.model_dump(mode="json"),
        }
        actions.append(type(f"HttpWrite_{name}", (HttpWrite,), attributes)())
    return actions


def _title(key: str) -> str:
    return key.replace("_", " ").capitalize()


def _output_model(name: str, response_fields: list[str]) -> type[BaseModel]:
    """What a read answers: the allow-listed top-level fields (absent ones are null)."""
    tops = dict.fromkeys(str(parse_path(path)[0]) for path in response_fields)
    fields: dict[str, Any] = {
        f"field_{index}": (Any, Field(default=None, alias=top)) for index, top in enumerate(tops)
    }
    model: type[BaseModel] = create_model(
        f"{_class(name)}Output",
        __config__=ConfigDict(serialize_by_alias=True, validate_by_alias=True, frozen=True),
        **fields,
    )
    return model


def _class(name: str) -> str:
    return "".join(word.capitalize() for word in name.split("_"))


def _check_request(request: HttpRequest, model: type[StrictInput], *, where: str) -> None:
    """Every placeholder names an argument; path ones a required scalar, text ones a scalar."""
    schema = input_schema(model)
    for name in requests.placeholders(request.path):
        _argument_schema(schema, name, where=f"{where}.path", required=True, scalar=True)
    for query_name, template in request.query.items():
        whole = requests.whole_placeholder(template)
        for name in requests.placeholders(template):
            _argument_schema(
                schema, name, where=f"{where}.query.{query_name}", scalar=whole is None
            )
    for text in _strings(request.body):
        whole = requests.whole_placeholder(text)
        for name in requests.placeholders(text):
            _argument_schema(schema, name, where=f"{where}.body", scalar=whole is None)


SCALARS = frozenset({"string", "integer", "number", "boolean"})


def _argument_schema(
    schema: dict[str, Any], path: str, *, where: str, required: bool = False, scalar: bool = False
) -> None:
    node = schema
    for part in path.split("."):
        properties = node.get("properties", {})
        if part not in properties:
            raise GatewayError(f"{where}: {{{path}}} names no argument of the input schema")
        if required and part not in node.get("required", []):
            raise GatewayError(
                f"{where}: {{{path}}} must be a required argument (a URL path has no gaps)"
            )
        node = _non_null(properties[part])
    if scalar and node.get("type") not in SCALARS and "enum" not in node and "const" not in node:
        raise GatewayError(f"{where}: {{{path}}} is not text, a number or a boolean")


def _non_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in schema.get("anyOf", []) if o != {"type": "null"}]
    return options[0] if len(options) == 1 and isinstance(options[0], dict) else schema
