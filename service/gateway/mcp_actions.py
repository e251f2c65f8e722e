"""The actions of an upstream MCP server's declared tools (made by ``service.gateway.mcp``).

A read tool becomes a ``ReadAction`` that proxies one ``tools/call`` and masks the declared
result fields; a write tool becomes a ``WriteAction`` (agents see only ``propose_*``) whose
``validate`` renders the declared summary and finds the money, and whose ``execute`` (the
worker only) makes exactly one ``tools/call`` carrying the idempotency key
``<draft_id>:<revision>`` in ``_meta`` (and in the declared argument). The upstream dedupes
on that key, so a redelivered execution cannot make the change twice.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from service.canonical import canonical_json, sha256_hex
from service.gateway import errors
from service.gateway.actions import GatewayRead, GatewayWrite, arguments
from service.gateway.paths import masked
from service.gateway.results import TooLarge, bounded_text, recordable, too_large_note
from service.gateway.upstream import UpstreamFailure, UpstreamResult, Upstreams, UpstreamSpec
from service.registry.base import ActionContext, Outcome, Preview
from service.text import inert
from service.validation import StrictInput

IDEMPOTENCY_META = "io.draftgate/idempotency-key"
MAX_OUTCOME_SUMMARY = 300
WITHHELD = "(withheld: the upstream answered in text, and fields of it are declared masked)"


class UpstreamAnswer(BaseModel):
    """What a proxied read answers: the upstream's structured result (declared fields
    masked), or its text when it gave no structure."""

    model_config = ConfigDict(frozen=True)

    upstream: str = Field(description="The namespace of the upstream server.")
    tool: str = Field(description="The upstream tool that answered.")
    data: dict[str, Any] | None = Field(
        default=None, description="The structured result, masked fields shown as ***."
    )
    text: str | None = Field(default=None, description="The result text, when not structured.")

    @model_serializer(mode="wrap")
    def _one_of_data_or_text(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # One documented shape (docs/gateway.md): data or text, never a null beside the other.
        dumped: dict[str, Any] = handler(self)
        return {k: v for k, v in dumped.items() if not (k in ("data", "text") and v is None)}


def schema_sha256(schema: dict[str, Any]) -> str:
    """The digest of an upstream input schema (RFC 8785 canonical form)."""
    return sha256_hex(canonical_json(schema))


class _Upstream:
    """What both kinds of proxied tool hold: where the upstream is and which tool."""

    upstreams: ClassVar[Upstreams]
    spec: ClassVar[UpstreamSpec]
    tool: ClassVar[str]
    mask: ClassVar[tuple[str, ...]]
    schema_sha256: ClassVar[str]

    def _call(
        self, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> UpstreamResult:
        try:
            return self.upstreams.call_tool(self.spec, self.tool, arguments, meta=meta)
        except UpstreamFailure as failure:
            if failure.transient:
                raise errors.upstream_unavailable(self.spec.namespace, failure.message) from None
            raise errors.upstream_refused(self.spec.namespace, self.tool, failure.message) from None

    def _data(self, result: UpstreamResult) -> tuple[dict[str, Any] | None, str | None]:
        """(masked structured data, text) as they may be shown and stored."""
        data = result.structured
        if data is None and self.mask:
            try:
                parsed = json.loads(result.text)
            except ValueError:
                return None, WITHHELD
            if not isinstance(parsed, dict):
                return None, WITHHELD
            data = parsed
        if data is not None:
            try:  # hashed into the audit chain when recorded: RFC 8785 JSON, bounded
                return recordable(masked(data, list(self.mask))), None
            except TooLarge as exc:
                return None, too_large_note(exc.size)
        return None, inert(bounded_text(result.text))


class McpReadAction(_Upstream, GatewayRead):
    Output = UpstreamAnswer

    def handle(self, ctx: ActionContext, params: StrictInput) -> UpstreamAnswer:
        result = self._call(arguments(params))
        if result.is_error:
            raise errors.upstream_refused(self.spec.namespace, self.tool, result.text)
        data, text = self._data(result)
        return UpstreamAnswer(upstream=self.spec.namespace, tool=self.tool, data=data, text=text)


class McpWriteAction(_Upstream, GatewayWrite):
    idempotency_argument: ClassVar[str | None]

    def validate(self, ctx: ActionContext, params: Any) -> Preview:
        self._same_contract()
        return self.preview(params)

    def execute(self, ctx: ActionContext, params: Any, idempotency_key: str) -> Outcome:
        # The catalogue is read again first: a schema that changed since the approval was
        # signed means the approved call may not mean what the approver read. (This and
        # the call are the two waits McpServer.calls_per_execution counts.)
        self._same_contract(refresh=True)
        sent = arguments(params)
        if self.idempotency_argument is not None:
            sent[self.idempotency_argument] = idempotency_key
        result = self._call(sent, meta={IDEMPOTENCY_META: idempotency_key})
        if result.is_error:  # the upstream's own refusal: final, with its words
            raise errors.upstream_refused(self.spec.namespace, self.tool, result.text)
        data, text = self._data(result)
        recorded: dict[str, Any] = {"upstream": self.spec.namespace, "tool": self.tool}
        if data is not None:
            recorded["result"] = data
        elif text:
            recorded["text"] = errors.upstream_text(text)  # inert, bounded
        return Outcome(summary=self._summary(text), data=recorded)

    def _summary(self, text: str | None) -> str:
        """The upstream's first line of prose, or "<title>: done" for data (JSON)."""
        line = (text or "").strip().split("\n", 1)[0]
        if not line or line[0] in "{[":
            return f"{self.title}: done"
        return errors.upstream_text(line)[:MAX_OUTCOME_SUMMARY]

    def _same_contract(self, *, refresh: bool = False) -> None:
        try:
            tools = self.upstreams.tools(self.spec, refresh=refresh)
        except UpstreamFailure as failure:
            if not refresh:  # at proposal time a missed re-read is no reason to refuse
                return
            raise errors.upstream_unavailable(self.spec.namespace, failure.message) from None
        current = next((tool for tool in tools if tool.name == self.tool), None)
        if current is None or schema_sha256(current.input_schema) != self.schema_sha256:
            raise errors.upstream_contract_changed(self.name)
