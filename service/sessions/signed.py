"""What a draft's signed params say, against the columns stored beside them.

The summary, amount and digest columns are written with the params but are not what an
approver signs: someone who can write to the database can change them alone (7.00 shown,
700.00 signed). The console shows the amount derived from the params through the action,
and names any disagreement, so that no card offers to sign a draft it cannot show faithfully.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from service.canonical import params_sha256
from service.money import AmountView
from service.registry.loader import ActionRegistry


@dataclass(frozen=True)
class SignedView:
    amount: AmountView | None  # derived from the params, never from the amount columns
    problem: str | None  # why the stored draft disagrees with its params (None: it agrees)


def signed_view(
    registry: ActionRegistry,
    *,
    action: str,
    params: dict[str, Any],
    stored_sha256: str,
    stored_amount: AmountView | None,
) -> SignedView:
    if params_sha256(params) != stored_sha256:
        return SignedView(None, "the stored params digest is not the digest of the params")
    write = registry.write(action)
    if write is None:
        return SignedView(None, f"the action {action} is not registered")
    try:
        money = write.amount_of(write.Input.model_validate_json(json.dumps(params)))
    except ValidationError:
        return SignedView(None, "the stored params are not valid for the action")
    amount = AmountView.of(money.amount_minor, money.currency) if money is not None else None
    if _key(amount) != _key(stored_amount):
        shown = stored_amount.display if stored_amount is not None else "none"
        signed = amount.display if amount is not None else "none"
        return SignedView(
            amount, f"the stored amount ({shown}) is not the params' amount ({signed})"
        )
    return SignedView(amount, None)


def _key(amount: AmountView | None) -> tuple[int, str] | None:
    return (amount.amount_minor, amount.currency) if amount is not None else None
