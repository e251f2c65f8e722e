"""What every gateway action declares, whatever is behind it (an MCP tool, an HTTP call).

The pieces shared by ``mcp:`` and ``http:`` entries of the gateway file: secret references,
the write declaration (summary template, risk, where the money is, the idempotency
argument, the contract version), masking paths, and the preview a write's ``validate``
derives from them.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.errors import invalid_argument
from service.gateway.errors import GatewayError
from service.gateway.templates import Placeholder, Template, parse_template
from service.masking import mask_text
from service.money import MAX_AMOUNT_MINOR, Money, currency_exponent
from service.registry.base import Preview, Risk

NAMESPACE_PATTERN = r"^[a-z][a-z0-9]{1,20}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_PATH_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_-]{0,63})((?:\[(?:\*|\d{1,4})\])*)")
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


def resolve_values(values: dict[str, Value], *, where: str) -> dict[str, str]:
    """Literal values as written, references resolved (header or environment maps)."""
    return {
        name: value.resolve(where=f"{where}.{name}") if isinstance(value, SecretRef) else value
        for name, value in values.items()
    }


def declared_values(values: dict[str, Value]) -> dict[str, Any]:
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


class WriteDeclaration(Declared):
    """The part of a write that is the same for every kind of upstream."""

    summary: str = Field(min_length=1, max_length=500)
    risk: Risk = Risk.MEDIUM
    money: MoneyPath | None = None
    idempotency_argument: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
    )
    contract_version: int = Field(default=1, ge=1, le=1_000_000)

    @field_validator("risk", mode="before")
    @classmethod
    def _risk(cls, value: Any) -> Any:
        return Risk(value) if value in {r.value for r in Risk} else value


def parse_path(text: str, *, wildcards: bool = True) -> tuple[str | int, ...]:
    """``entities[*].observations`` → ``("entities", "*", "observations")``; ValueError if
    it is no path (names, dots, ``[n]`` and, where allowed, ``[*]``)."""
    segments: list[str | int] = []
    for part in text.split("."):
        match = _PATH_SEGMENT.fullmatch(part)
        if match is None:
            raise ValueError(f"{text!r} is not a path (names, dots, [n] and [*])")
        segments.append(match.group(1))
        for index in re.findall(r"\[(\*|\d+)\]", match.group(2)):
            if index == "*" and not wildcards:
                raise ValueError(f"{text!r}: [*] is not allowed here")
            segments.append(index if index == "*" else int(index))
    return tuple(segments)


def lookup(data: Any, path: tuple[str | int, ...]) -> Any:
    """The value at a wildcard-free path, or None."""
    node = data
    for segment in path:
        if isinstance(segment, int):
            node = node[segment] if isinstance(node, list) and segment < len(node) else None
        else:
            node = node.get(segment) if isinstance(node, dict) else None
        if node is None:
            return None
    return node


def masked(data: Any, paths: list[str]) -> Any:
    """``data`` with the value at every path masked like PII (``***``); absent paths are fine."""
    for path in paths:
        data = _mask(data, parse_path(path))
    return data


def _mask(node: Any, path: tuple[str | int, ...]) -> Any:
    if not path:
        if isinstance(node, list):
            return [_mask(item, ()) for item in node]
        if isinstance(node, dict):
            return {key: _mask(value, ()) for key, value in node.items()}
        return mask_text(node) if isinstance(node, str) else ("***" if node is not None else None)
    head, rest = path[0], path[1:]
    if head == "*" and isinstance(node, list):
        return [_mask(item, rest) for item in node]
    if isinstance(head, int) and isinstance(node, list) and head < len(node):
        return [_mask(item, rest) if i == head else item for i, item in enumerate(node)]
    if isinstance(head, str) and head != "*" and isinstance(node, dict) and head in node:
        return {key: _mask(value, rest) if key == head else value for key, value in node.items()}
    return node


class WriteContract:
    """A write declaration checked against its input model: renders the preview."""

    def __init__(self, declaration: WriteDeclaration, model: type[BaseModel], *, where: str):
        self.declaration = declaration
        self.template: Template = parse_template(
            declaration.summary, model, where=f"{where}.summary"
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
                    raise GatewayError(f"{where}.money: the input has no field {path!r}")
        self._same_money(where)

    def _same_money(self, where: str) -> None:
        """A ``|money`` amount in the summary is the declared one: policies judge ``money:``
        and approvers read the summary, so the two must be the same amount in one currency."""
        for part in self.template.parts:
            if not isinstance(part, Placeholder) or part.filter != "money":
                continue
            money = self.money
            if money is None or money.amount_minor is None:
                raise GatewayError(
                    f"{where}.summary: a |money placeholder needs money: {{amount_minor: ..., "
                    "currency: ...}} naming the same amount, so policies judge what is shown"
                )
            currency = money.currency
            same_currency = (
                part.currency_code == currency
                if _CURRENCY_CODE.fullmatch(currency)
                else part.currency_path == parse_path(currency, wildcards=False)
            )
            if part.path != parse_path(money.amount_minor, wildcards=False) or not same_currency:
                raise GatewayError(
                    f"{where}.summary: a |money placeholder shows another amount or currency "
                    f"than money: declares (use {{{money.amount_minor}|money:{currency}}})"
                )

    def amount_of(self, params: dict[str, Any]) -> Money | None:
        return self.money.amount_of(params) if self.money is not None else None

    def preview(self, params: dict[str, Any]) -> Preview:
        return Preview(
            summary=self.template.render(params),
            amount=self.amount_of(params),
            risk=self.declaration.risk,
        )
