"""The actions of a REST API's declared operations (made by ``service.gateway.http``).

A read calls the API when the agent asks and answers with only the allow-listed fields of
the response, masked where declared. A write becomes a draft; after approval the worker
makes the declared request, once per ``Idempotency-Key: <draft_id>:<revision>`` (the
upstream dedupes on it, so a retry or a redelivery after a crash cannot make the change
twice), and the response's status decides the outcome: success, a business failure (final,
with the upstream's message, inert and bounded) or transient (retried by the worker's
backoff).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, create_model

from service.errors import invalid_argument
from service.gateway import errors
from service.gateway import http_requests as requests
from service.gateway.actions import GatewayRead, GatewayWrite, arguments
from service.gateway.declarations import resolve_values
from service.gateway.errors import GatewayError
from service.gateway.paths import masked, parse_path
from service.gateway.results import TooLarge, recordable, too_large_note
from service.gateway.where import Where
from service.registry.base import ActionContext, Outcome, Preview
from service.validation import StrictInput

if TYPE_CHECKING:
    from service.gateway.http import HttpAction, HttpService


class Operation:
    """One declared operation of one service: how its request is made and its answer read."""

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
            headers = resolve_values(self.service.headers, where=Where(f"http {namespace}"))
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


class HttpRead(GatewayRead):
    upstream: ClassVar[Operation]

    def handle(self, ctx: ActionContext, params: StrictInput) -> BaseModel:
        answer = self.upstream.call(arguments(params), idempotency_key=None)
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


class HttpWrite(GatewayWrite):
    upstream: ClassVar[Operation]

    def validate(self, ctx: ActionContext, params: StrictInput) -> Preview:
        self.upstream.request(arguments(params))  # refuse now what could not be sent later
        return self.preview(params)

    def execute(self, ctx: ActionContext, params: StrictInput, idempotency_key: str) -> Outcome:
        answer = self.upstream.call(arguments(params), idempotency_key=idempotency_key)
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


def output_model(name: str, response_fields: list[str]) -> type[BaseModel]:
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
