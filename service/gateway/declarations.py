"""What every entry of the gateway file declares, whatever kind of upstream is behind it.

The models every kind builds on: ``UpstreamDeclaration`` (one entry: its namespace, its
timeout, its declared tools) and ``ToolDeclaration`` (one tool: read or write, and for a
write the summary template, risk, money path and contract version); the values they use
(secret references, money paths, URLs); and ``WriteContract``, a write declaration checked
against its input model, which renders the preview a write's ``validate`` returns.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.errors import invalid_argument
from service.gateway.errors import GatewayError
from service.gateway.naming import NAMESPACE_PATTERN, namespace_problem
from service.gateway.paths import lookup, parse_path
from service.gateway.templates import Placeholder, Template, parse_template
from service.gateway.where import Where
from service.money import MAX_AMOUNT_MINOR, Money, currency_exponent
from service.registry.base import Preview, Risk

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_CURRENCY_CODE = re.compile(r"[A-Z]{3}")


class Declared(BaseModel):
    """Base of every model of the gateway file: unknown keys are errors, types are exact."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SecretRef(Declared):
    """A secret named, never written: an environment variable or a file, plus a prefix
    (``"Bearer "``) put in front of it."""

    env: str | None = Field(default=None, pattern=ENV_NAME_PATTERN)
    file: str | None = Field(default=None, min_length=1, max_length=4096)
    prefix: str = Field(default="", max_length=64)

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("a secret reference names exactly one of env or file")
        return self

    def resolve(self, *, where: str) -> str:
        """The secret's value; GatewayError naming the reference (never a value) if absent."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise GatewayError(f"{where}: the environment variable {self.env} is not set")
        else:
            assert self.file is not None
            try:
                value = Path(self.file).read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise GatewayError(
                    f"{where}: the secret file {self.file} cannot be read ({exc.strerror})"
                ) from None
        if not value:
            raise GatewayError(f"{where}: the secret {self.env or self.file} is empty")
        return self.prefix + value


# A value that may be written inline (not secret) or referenced (secret).
Value = str | SecretRef


def resolve_values(values: Mapping[str, Value], *, where: Where) -> dict[str, str]:
    """Literal values as written, references resolved (header or environment maps)."""
    return {
        name: value.resolve(where=str(where / name)) if isinstance(value, SecretRef) else value
        for name, value in values.items()
    }


def declared_values(values: Mapping[str, Value]) -> dict[str, Any]:
    """Values as the file declares them, for a fingerprint: literals as written, secrets as
    their reference (env or file name and prefix), never resolved."""
    return {
        name: value.model_dump(mode="json") if isinstance(value, SecretRef) else value
        for name, value in values.items()
    }


class MoneyPath(Declared):
    """Where the amount of a write is, so amount policies apply.

    ``amount_minor`` names an integer in minor units; ``amount`` a decimal in major units
    (a JSON number or a decimal string). ``currency`` is a path to the currency field or a
    fixed ISO 4217 code; ``exponent``, when written, must be that currency's ISO exponent
    (it states what the operator expects; the exponent used is always ISO 4217's).
    """

    amount_minor: str | None = None
    amount: str | None = None
    currency: str
    exponent: int | None = Field(default=None, ge=0, le=4)

    @model_validator(mode="after")
    def _one_amount(self) -> MoneyPath:
        if (self.amount_minor is None) == (self.amount is None):
            raise ValueError("money names exactly one of amount_minor or amount")
        for path in (self.amount_minor or self.amount, self.currency):
            assert path is not None
            if not _CURRENCY_CODE.fullmatch(path):
                parse_path(path, wildcards=False)
        if _CURRENCY_CODE.fullmatch(self.currency):
            exponent = currency_exponent(self.currency)
            if self.exponent is not None and self.exponent != exponent:
                raise ValueError(
                    f"exponent {self.exponent} is not {self.currency}'s ISO 4217 exponent "
                    f"({exponent})"
                )
        return self

    def amount_of(self, params: dict[str, Any]) -> Money:
        """The Money in ``params``; INVALID_ARGUMENT if it is not there or not money."""
        currency = (
            self.currency
            if _CURRENCY_CODE.fullmatch(self.currency)
            else lookup(params, parse_path(self.currency, wildcards=False))
        )
        if not isinstance(currency, str):
            raise invalid_argument(f"The currency ({self.currency}) is missing.")
        try:
            exponent = currency_exponent(currency)
        except ValueError as exc:
            raise invalid_argument(f"{self.currency}: {exc}") from None
        if self.exponent is not None and self.exponent != exponent:
            raise invalid_argument(
                f"{self.currency}: {currency} has {exponent} minor digits, not {self.exponent}."
            )
        path = self.amount_minor or self.amount
        assert path is not None
        raw = lookup(params, parse_path(path, wildcards=False))
        minor = raw if self.amount_minor is not None else _minor(raw, exponent, path)
        if isinstance(minor, bool) or not isinstance(minor, int):
            raise invalid_argument(f"{path}: the amount must be an integer in minor units.")
        if not 1 <= minor <= MAX_AMOUNT_MINOR:
            raise invalid_argument(f"{path}: the amount must be between 1 and 2^53-1 minor units.")
        return Money(amount_minor=minor, currency=currency)


def _minor(raw: Any, exponent: int, path: str) -> Any:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise invalid_argument(f"{path}: the amount is missing or not a number.")
    try:
        value = Decimal(str(raw))
    except InvalidOperation:
        raise invalid_argument(f"{path}: {str(raw)[:40]!r} is not a decimal amount.") from None
    if not value.is_finite():
        raise invalid_argument(f"{path}: the amount is not finite.")
    minor = value.scaleb(exponent)
    if minor != minor.to_integral_value():
        raise invalid_argument(f"{path}: the amount has more than {exponent} fractional digits.")
    return int(minor)


def check_url(url: str) -> None:
    """https anywhere, plain http only to this machine (a token must not cross a network
    in the clear). ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL")
    if parts.username or parts.password:
        raise ValueError("a URL carries no credentials; use headers with a secret reference")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError("plain http is allowed only to a loopback address; use https")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SourceDeclaration(Declared):
    """A write's source (docs/approvals.md, "Source-bound approvals"): the declared read of
    the same upstream that answers the record the write changes, the write's arguments it
    is called with, and the parts of its answer that are the record's state."""

    read: str = Field(min_length=1, max_length=128, description="The upstream's read tool.")
    arguments: dict[str, str] = Field(
        min_length=1, max_length=20, description="read argument: path in the write's arguments"
    )
    select: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="Paths in the read's answer (as the agent sees it): the facts shown and "
        "digested. None: the whole answer is digested, and shown as its digest.",
    )

    @field_validator("arguments")
    @classmethod
    def _argument_paths(cls, arguments: dict[str, str]) -> dict[str, str]:
        for path in arguments.values():
            parse_path(path, wildcards=False)
        return arguments

    @field_validator("select")
    @classmethod
    def _select_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parse_path(path, wildcards=False)
        return paths


class ToolDeclaration(Declared):
    """One declared tool of an upstream, whatever the kind: what is shared by all of them.

    A kind subclasses it with what its tools add (an MCP tool's idempotency argument, an
    HTTP action's request); ``write_only`` names the keys a read may not have.
    """

    write_only: ClassVar[tuple[str, ...]] = ("summary", "money", "source")

    kind: Literal["read", "write"]
    title: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, min_length=1, max_length=4000)
    mask: list[str] = Field(default_factory=list, max_length=100)
    # write only: what the approver reads and signs over, and what policies judge
    summary: str | None = Field(default=None, min_length=1, max_length=500)
    risk: Risk = Risk.MEDIUM
    money: MoneyPath | None = None
    # write only: the record it changes, read and bound into approvals
    source: SourceDeclaration | None = None
    contract_version: int = Field(default=1, ge=1, le=1_000_000)

    @field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        return Risk(value) if value in {r.value for r in Risk} else value

    @field_validator("mask")
    @classmethod
    def _mask_paths(cls, paths: list[str]) -> list[str]:
        for path in paths:
            parse_path(path)
        return paths

    @model_validator(mode="after")
    def _by_kind(self) -> ToolDeclaration:
        if self.kind == "write" and self.summary is None:
            raise ValueError("a write needs a summary template (what the approver reads)")
        written = [name for name in self.write_only if getattr(self, name) is not None]
        if self.kind == "read" and written:
            raise ValueError(f"a read takes no {', '.join(written)}")
        return self

    def idempotency_target(self) -> str | None:
        """The upstream argument that receives ``<draft_id>:<revision>``, if any."""
        return None

    def terms(self) -> dict[str, Any]:
        """What a write means beyond its input schema (part of its contract's digest)."""
        return {
            "summary": self.summary,
            "risk": self.risk.value,
            "money": None if self.money is None else self.money.model_dump(mode="json"),
            "idempotency_argument": self.idempotency_target(),
            "contract_version": self.contract_version,
            # Added with sources: a write without one keeps the contract digest it had.
            **({} if self.source is None else {"source": self.source.model_dump(mode="json")}),
        }


class UpstreamDeclaration(Declared):
    """One entry of the gateway file: an upstream, its namespace, its declared tools.

    A kind's model sets ``section`` (the file's key it is listed under), ``tools_key`` (its
    field of declared tools) and, when a section holds several kinds, ``discriminator``
    (the field whose literal value tells them apart: ``transport``). ``calls_per_execution``
    and ``call_overhead_seconds`` say how long an execution attempt may wait on it.
    """

    section: ClassVar[str]
    tools_key: ClassVar[str]
    discriminator: ClassVar[str | None] = None
    calls_per_execution: ClassVar[int] = 1
    call_overhead_seconds: ClassVar[float] = 0.0

    namespace: str = Field(pattern=NAMESPACE_PATTERN)
    timeout_seconds: float = Field(default=10, gt=0, le=300)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, namespace: str) -> str:
        problem = namespace_problem(namespace)
        if problem is not None:
            raise ValueError(problem)
        return namespace

    def declared(self) -> Mapping[str, ToolDeclaration]:
        """The declared tools by the upstream's own names."""
        tools: Mapping[str, ToolDeclaration] = getattr(self, self.tools_key)
        return tools

    def calls(self) -> int:
        """The upstream calls of one execution attempt: a write with a source reads it
        first (service.gateway.actions.GatewayWrite.source)."""
        sourced = any(tool.source is not None for tool in self.declared().values())
        return self.calls_per_execution + (1 if sourced else 0)

    def wait_seconds(self, timeout_seconds: float | None = None) -> float:
        """The longest one execution attempt waits on this upstream (with this timeout)."""
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        return self.calls() * (timeout + self.call_overhead_seconds)

    def longest_timeout(self, wait_budget: float) -> float:
        """The largest timeout_seconds whose wait fits ``wait_budget``."""
        return wait_budget / self.calls() - self.call_overhead_seconds


class WriteContract:
    """A write declaration checked against its input model: renders the preview."""

    def __init__(self, declaration: ToolDeclaration, model: type[BaseModel], *, where: Where):
        assert declaration.summary is not None  # a write's (ToolDeclaration._by_kind)
        self.declaration = declaration
        self.template: Template = parse_template(
            declaration.summary, model, where=str(where / "summary")
        )
        self.money = declaration.money
        if self.money is not None:
            properties = set(model.model_fields) | {
                f.alias for f in model.model_fields.values() if f.alias
            }
            for path in (self.money.amount_minor or self.money.amount, self.money.currency):
                assert path is not None
                if _CURRENCY_CODE.fullmatch(path) and path == self.money.currency:
                    continue
                if parse_path(path, wildcards=False)[0] not in properties:
                    raise (where / "money").error(f"the input has no field {path!r}")
        self._same_money(where / "summary")

    def _same_money(self, where: Where) -> None:
        """A ``|money`` amount in the summary is the declared one: policies judge ``money:``
        and approvers read the summary, so the two must be the same amount in one currency."""
        for part in self.template.parts:
            if not isinstance(part, Placeholder) or part.filter != "money":
                continue
            money = self.money
            if money is None or money.amount_minor is None:
                raise where.error(
                    "a |money placeholder needs money: {amount_minor: ..., currency: ...} "
                    "naming the same amount, so policies judge what is shown"
                )
            currency = money.currency
            same_currency = (
                part.currency_code == currency
                if _CURRENCY_CODE.fullmatch(currency)
                else part.currency_path == parse_path(currency, wildcards=False)
            )
            if part.path != parse_path(money.amount_minor, wildcards=False) or not same_currency:
                raise where.error(
                    "a |money placeholder shows another amount or currency than money: "
                    f"declares (use {{{money.amount_minor}|money:{currency}}})"
                )

    def amount_of(self, params: dict[str, Any]) -> Money | None:
        return self.money.amount_of(params) if self.money is not None else None

    def preview(self, params: dict[str, Any]) -> Preview:
        return Preview(
            summary=self.template.render(params),
            amount=self.amount_of(params),
            risk=self.declaration.risk,
        )
