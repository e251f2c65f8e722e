"""Actions made from an upstream MCP server's declared tools.

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

from pydantic import BaseModel, ConfigDict, Field

from service.canonical import canonical_json, sha256_hex
from service.gateway import errors
from service.gateway.declarations import WriteContract, masked
from service.gateway.results import TooLarge, bounded_text, recordable, too_large_note
from service.gateway.upstream import UpstreamFailure, UpstreamResult, Upstreams, UpstreamSpec
from service.registry.base import ActionContext, Outcome, Preview, ReadAction, WriteAction
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


class McpReadAction(_Upstream, ReadAction):
    Output = UpstreamAnswer

    def handle(self, ctx: ActionContext, params: StrictInput) -> UpstreamAnswer:
        result = self._call(params.model_dump(mode="json", exclude_none=True))
        if result.is_error:
            raise errors.upstream_refused(self.spec.namespace, self.tool, result.text)
        data, text = self._data(result)
        return UpstreamAnswer(upstream=self.spec.namespace, tool=self.tool, data=data, text=text)


class McpWriteAction(_Upstream, WriteAction):
    contract: ClassVar[WriteContract]
    idempotency_argument: ClassVar[str | None]

    def amount_of(self, params: Any) -> Any:
        return self.contract.amount_of(params.model_dump(mode="json", exclude_none=True))

    def validate(self, ctx: ActionContext, params: Any) -> Preview:
        self._same_contract()
        return self.contract.preview(params.model_dump(mode="json", exclude_none=True))

    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        # An MCP server offers no "was this key applied?" question; it dedupes the repeated
        # call instead, so a redelivery simply calls again with the same key (execute).
        return None

    def execute(self, ctx: ActionContext, params: Any, idempotency_key: str) -> Outcome:
        # The catalogue is read again first: a schema that changed since the approval was
        # signed means the approved call may not mean what the approver read.
        self._same_contract(refresh=True)
        arguments = params.model_dump(mode="json", exclude_none=True)
        if self.idempotency_argument is not None:
            arguments[self.idempotency_argument] = idempotency_key
        result = self._call(arguments, meta={IDEMPOTENCY_META: idempotency_key})
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


def read_action(
    *,
    upstreams: Upstreams,
    spec: UpstreamSpec,
    tool: str,
    title: str,
    description: str,
    input_model: type[StrictInput],
    mask: list[str],
    schema_digest: str,
) -> McpReadAction:
    name = f"{spec.namespace}_{tool}"
    cls = type(
        f"Read_{name}",
        (McpReadAction,),
        {
            "name": name,
            "kind": "read",
            "contract_version": 1,
            "title": title,
            "description": description,
            "Input": input_model,
            "upstreams": upstreams,
            "spec": spec,
            "tool": tool,
            "mask": tuple(mask),
            "schema_sha256": schema_digest,
        },
    )
    action: McpReadAction = cls()
    return action


def write_action(
    *,
    upstreams: Upstreams,
    spec: UpstreamSpec,
    tool: str,
    title: str,
    description: str,
    input_model: type[StrictInput],
    contract: WriteContract,
    mask: list[str],
    schema_digest: str,
    contract_version: int,
    declaration_fingerprint: dict[str, Any] | None = None,
) -> McpWriteAction:
    name = f"{spec.namespace}_{tool}"
    cls = type(
        f"Write_{name}",
        (McpWriteAction,),
        {
            "name": name,
            "kind": "write",
            "contract_version": contract_version,
            "title": title,
            "description": description,
            "Input": input_model,
            "upstreams": upstreams,
            "spec": spec,
            "tool": tool,
            "mask": tuple(mask),
            "schema_sha256": schema_digest,
            "contract": contract,
            "idempotency_argument": contract.declaration.idempotency_argument,
            "declaration_fingerprint": declaration_fingerprint,
        },
    )
    action: McpWriteAction = cls()
    return action
