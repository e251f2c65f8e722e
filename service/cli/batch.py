"""``draftgate approve --batch ID ID …``: one signature over several drafts (docs/approvals.md,
"Batch approval"). Like ``approve``, it signs only what it checked: each item of the server's
statement must be the draft the server shows (its params digest recomputed here), and the
totals what those drafts add up to."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from service.canonical import canonical_json, params_sha256
from service.cli.client import ApiClient
from service.cli.common import echo, echo_text, fail
from service.cli.passphrase import unlock
from service.money import render_amount
from service.signing import key_id_for, public_key_b64, sign
from service.sql import rfc3339_seconds, utcnow

ITEM_FIELDS = ("revision", "action", "contract_version", "params_sha256", "source_revision")


def approve_batch(
    api: ApiClient, draft_ids: list[str], key_file: Path, *, yes: bool, confirm: Any, call: Any
) -> dict[str, Any]:
    """Check, show, confirm, sign and post the batch; the server's result."""
    try:
        private_key = unlock(key_file)
    except (OSError, ValueError) as exc:
        fail(f"cannot use {key_file}: {exc}")
    offer = call(lambda: api.post("/v1/approvals/batch/statement", {"draft_ids": draft_ids}))
    statement = offer["statement"]
    items = statement.get("items") or []
    if [item.get("draft_id") for item in items] != draft_ids:
        fail("refusing to sign: the server's batch does not name exactly the drafts asked")
    totals: dict[str, int] = defaultdict(int)
    for item in items:
        draft = call(lambda item=item: api.get(f"/v1/drafts/{item['draft_id']}"))
        _check_item(item, draft)
        api.report_view(draft)
        amount = draft.get("amount")
        if amount:
            totals[amount["currency"]] += amount["amount_minor"]
        echo_text(f"{draft['draft_id']} rev {draft['revision']}: ", draft["summary"])
    signed_totals = {t["currency"]: t["amount_minor"] for t in statement.get("totals") or []}
    if dict(totals) != signed_totals:
        fail("refusing to sign: the batch's totals are not what its drafts add up to")
    words = ", ".join(render_amount(m, c) for c, m in sorted(totals.items())) or "no amount"
    echo(f"batch of {len(items)} drafts, in all: {words}")
    if not yes:
        confirm(f"Sign one approval of these {len(items)} drafts?")
    ours = {
        **statement,
        "key_id": key_id_for(public_key_b64(private_key)),
        "issued_at": rfc3339_seconds(utcnow()),
    }
    body = {"statement": ours, "signature": sign(private_key, canonical_json(ours))}
    result: dict[str, Any] = call(lambda: api.post("/v1/approvals/batch", body))
    return result


def _check_item(item: dict[str, Any], draft: dict[str, Any]) -> None:
    shown = {
        "revision": draft.get("revision"),
        "action": draft.get("action"),
        "contract_version": draft.get("contract_version"),
        "params_sha256": params_sha256(draft.get("params") or {}),
        "source_revision": draft.get("source_revision"),
    }
    mismatched = [name for name in ITEM_FIELDS if item.get(name) != shown[name]]
    if draft.get("params_sha256") != shown["params_sha256"]:
        mismatched.append("params_sha256 (of the params shown)")
    if draft.get("status") != "proposed":
        fail(f"refusing to sign: draft {draft.get('draft_id')} is {draft.get('status')}")
    if mismatched:
        fail(
            f"refusing to sign: the batch's item for {item.get('draft_id')} does not match the "
            f"draft shown ({', '.join(mismatched)})"
        )
