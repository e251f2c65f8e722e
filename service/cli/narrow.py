"""``draftgate narrow DRAFT_ID --amount 40.00 --key …``: lower a draft's amount instead of
rejecting it, and approve the narrowed revision in the same step (docs/approvals.md,
"Narrowing"). Like ``approve`` it signs only what it computed itself: the narrowed params
from the params shown, their digest, and the draft's next revision."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from service.approvals.schemas import Decision, signed_request, statement_for
from service.canonical import params_sha256
from service.cli.approver import KeyOption, YesOption, checked_call, confirm
from service.cli.client import ApiClient, ApiUrlOption, TokenOption
from service.cli.common import echo, fail
from service.cli.passphrase import unlock
from service.money import major_to_minor, render_amount
from service.signing import key_id_for, public_key_b64
from service.sql import rfc3339_seconds, utcnow


def narrow(
    draft_id: str,
    key: KeyOption,
    amount: Annotated[
        str | None, typer.Option(help='The lower amount, in the draft\'s currency: "40.00".')
    ] = None,
    drop: Annotated[
        list[str] | None,
        typer.Option("--drop", help="An optional effect the action lets you drop (repeat it)."),
    ] = None,
    yes: YesOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Lower a draft's amount (or drop an optional effect) and approve what is left."""
    try:
        private_key = unlock(key)
    except (OSError, ValueError) as exc:
        fail(f"cannot use {key}: {exc}")
    api = ApiClient.from_options(api_url, token)
    draft = checked_call(lambda: api.get(f"/v1/drafts/{draft_id}"))
    if draft.get("draft_id") != draft_id or draft.get("status") != "proposed":
        fail(f"the draft is {draft.get('status')}; only a proposed draft can be narrowed")
    if params_sha256(draft["params"]) != draft["params_sha256"]:
        fail("refusing to sign: the params shown do not match the draft's params digest")
    params = _narrowed(draft["params"], amount, drop or [])
    offered = draft.get("statement_to_sign") or {}
    statement = statement_for(
        {**draft, "revision": draft["revision"] + 1, "params_sha256": params_sha256(params)},
        decision=Decision.APPROVE,
        approver=str(offered.get("approver")),
        key_id=key_id_for(public_key_b64(private_key)),
        issued_at=rfc3339_seconds(utcnow()),
    )
    echo(f"narrow draft {draft_id}: {draft['summary']}")
    echo(f"  to: {_words(params, draft['params'])}")
    if not yes:
        confirm(f"Narrow it and sign your approval of revision {draft['revision'] + 1}?")
    body = {"params": params, **signed_request(statement, private_key)}
    narrowed = checked_call(lambda: api.post(f"/v1/drafts/{draft_id}/narrow", body))
    echo(
        f"narrowed to revision {narrowed['revision']}: {narrowed['summary']} "
        f"(draft is {narrowed['status']})"
    )


def _narrowed(params: dict[str, Any], amount: str | None, drop: list[str]) -> dict[str, Any]:
    narrowed = {name: value for name, value in params.items() if name not in drop}
    missing = [name for name in drop if name not in params]
    if missing:
        fail(f"the draft has no {', '.join(missing)} to drop")
    if amount is not None:
        current = params.get("amount")
        if not isinstance(current, dict) or "currency" not in current:
            fail("this draft has no amount to lower")
        try:
            minor = major_to_minor(amount, current["currency"])
        except ValueError as exc:
            fail(f"--amount: {exc}")
        narrowed["amount"] = {**current, "amount_minor": minor}
    if narrowed == params:
        fail("nothing to narrow: give --amount or --drop")
    return narrowed


def _words(params: dict[str, Any], before: dict[str, Any]) -> str:
    amount = params.get("amount")
    if isinstance(amount, dict) and amount != before.get("amount"):
        was = before["amount"]
        return (
            f"{render_amount(amount['amount_minor'], amount['currency'])} instead of "
            f"{render_amount(was['amount_minor'], was['currency'])}"
        )
    return "without " + ", ".join(sorted(set(before) - set(params)))
