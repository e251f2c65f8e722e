"""PII masking for tool output and audit data.

Phones keep their first 3 and last 4 digits; addresses keep only the district
and coarser parts. Models that hold PII implement ``masked()``; everything
else is dumped as is.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel


@runtime_checkable
class HasMaskedView(Protocol):
    def masked(self) -> dict[str, Any]: ...


SHORT_PHONE = 10  # below this, first 3 + last 4 would reveal most of the number


def mask_phone(phone: str) -> str:
    """``+8613812345678`` → ``+86*******5678``: first 3 and last 4 characters stay.

    Numbers shorter than 10 characters keep only their last 2 (under 6, nothing).
    """
    if len(phone) < SHORT_PHONE:
        visible = 2 if len(phone) >= 6 else 0
        return "*" * (len(phone) - visible) + phone[len(phone) - visible :]
    return phone[:3] + "*" * (len(phone) - 7) + phone[-4:]


def mask_text(value: str) -> str:
    return "***" if value else value


def masked_dump(model: BaseModel) -> dict[str, Any]:
    """``model_dump(mode="json", exclude_none=True)`` with PII-holding sub-models masked."""
    dumped = model.model_dump(mode="json", exclude_none=True)
    for name in dumped:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            dumped[name] = _masked(value)
        elif isinstance(value, list | tuple):
            dumped[name] = [
                _masked(item) if isinstance(item, BaseModel) else dumped[name][index]
                for index, item in enumerate(value)
            ]
    return dumped


def _masked(model: BaseModel) -> dict[str, Any]:
    return model.masked() if isinstance(model, HasMaskedView) else masked_dump(model)
