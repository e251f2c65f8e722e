"""Batch approval (docs/approvals.md, "Batch approval"): one signature over several drafts,
each bound exactly as an approval binds it, and their totals per currency. All or nothing:
if any item no longer holds, nothing of the batch counts, and each failing item is named.

Each draft of an accepted batch gets its own approval row holding the whole batch statement
and its signature; the progress owner re-checks that the statement names the draft's current
revision, exactly as it checks an approval statement (``progress.StoredProof``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session

from service.approvals import actions, errors, progress, signatures
from service.approvals.schemas import (
    BATCH_STATEMENT_TYPE,
    BatchAsk,
    BatchDraftResult,
    BatchItemView,
    BatchRequest,
    BatchResult,
    BatchStatement,
    BatchToSign,
    Decision,
)
from service.drafts import repository as drafts_repository
from service.drafts.errors import draft_unavailable
from service.drafts.models import Draft
from service.errors import DomainError
from service.money import AmountView
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sql import rfc3339_seconds


def statement_to_sign(
    session: Session, principal: Principal, ask: BatchAsk, *, runtime: Runtime, now: datetime
) -> BatchToSign:
    """The batch statement over the drafts' current revisions, what each is, and the totals."""
    principal.require(Role.APPROVER)
    drafts = []
    for draft_id in ask.draft_ids:
        draft = drafts_repository.get(session, principal.tenant, draft_id)
        if draft is None:
            raise draft_unavailable()
        drafts.append(draft)
    rules = progress.Rules.of(runtime)
    totals = _totals(rules, drafts)
    statement: dict[str, Any] = {
        "type": BATCH_STATEMENT_TYPE,
        "tenant": principal.tenant,
        "approver": principal.subject,
        "key_id": actions.own_key_id(session, principal),
        "issued_at": rfc3339_seconds(now),
        "items": [_item(draft) for draft in drafts],
        "totals": [{"currency": c, "amount_minor": m} for c, m in sorted(totals.items())],
    }
    return BatchToSign(
        statement=statement,
        items=[
            BatchItemView(
                draft_id=draft.id,
                revision=draft.revision,
                action=draft.action,
                summary=draft.summary,
                amount=AmountView.of(draft.amount_minor, draft.currency)
                if draft.amount_minor is not None and draft.currency
                else None,
            )
            for draft in drafts
        ],
        totals=[AmountView.of(m, c) for c, m in sorted(totals.items())],
    )


def submit(
    session: Session,
    principal: Principal,
    request: BatchRequest,
    *,
    runtime: Runtime,
    now: datetime,
    trace_id: str | None = None,
) -> BatchResult:
    """Accept a signed batch: every item holds and the totals add up, or nothing counts."""
    principal.require(Role.APPROVER)
    statement = request.statement
    actions.check_signer_identity(principal, tenant=statement.tenant, approver=statement.approver)
    actions.check_freshness(
        statement.issued_at, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds
    )
    key = signatures.verify_request(
        session,
        principal,
        request,
        statement,
        settings=runtime.settings,
        now=now,
    )
    rules = progress.Rules.of(runtime)
    drafts = _lock_items(session, principal, runtime, rules, statement, now=now)
    signed = statement.signed_value()
    for item, draft in zip(statement.items, drafts, strict=True):
        decision = actions.Signed(
            signed, Decision.APPROVE, None, item.params_sha256, statement.issued_at,
            batch_id=statement.batch_id,
        )  # fmt: skip
        actions.record_decision(
            session, rules, principal, draft, key, request, decision, now=now, trace_id=trace_id
        )
    results = []
    for draft in drafts:
        standing = actions.settle(
            session, rules, draft, actor=principal.actor, now=now, trace_id=trace_id
        )
        results.append(
            BatchDraftResult(
                draft_id=draft.id,
                status=draft.status.value,
                approvals_received=standing.received,
                approvals_required=standing.required,
            )
        )
    return BatchResult(batch_id=statement.batch_id, drafts=results)


def _lock_items(
    session: Session,
    principal: Principal,
    runtime: Runtime,
    rules: progress.Rules,
    statement: BatchStatement,
    *,
    now: datetime,
) -> list[Draft]:
    """Each item's draft, locked (in id order, so two batches never wait on each other),
    open, and exactly as signed; else BATCH_REFUSED naming every item that does not hold."""
    found: dict[str, Draft] = {}
    problems: list[dict[str, str | None]] = []
    for item in sorted(statement.items, key=lambda i: i.draft_id):
        try:
            draft = actions.lock_open_draft(
                session, principal, item.draft_id, Decision.APPROVE, now=now
            )
            actions.check_contract(runtime, draft)
            actions.check_binding(draft, item)
            actions.check_signer(
                progress.of_draft(session, rules, draft), principal, Decision.APPROVE
            )
        except DomainError as refused:
            problems.append(
                {"draft_id": item.draft_id, "code": refused.code, "message": refused.message}
            )
            continue
        found[draft.id] = draft
    drafts = [found[item.draft_id] for item in statement.items if item.draft_id in found]
    signed_totals = {total.currency: total.amount_minor for total in statement.totals}
    if not problems and _totals(rules, drafts) != signed_totals:
        problems.append(
            {
                "draft_id": None,
                "code": "TOTALS_MISMATCH",
                "message": "the signed totals are not what the drafts add up to",
            }
        )
    if problems:
        raise errors.batch_refused(problems, len(statement.items))
    return drafts


def _item(draft: Draft) -> dict[str, Any]:
    item: dict[str, Any] = {
        "draft_id": draft.id,
        "revision": draft.revision,
        "action": draft.action,
        "contract_version": draft.contract_version,
        "params_sha256": draft.params_sha256,
    }
    if draft.source_revision is not None:
        item["source_revision"] = draft.source_revision
    return item


def _totals(rules: progress.Rules, drafts: Sequence[Draft]) -> dict[str, int]:
    """What the drafts' signed params move, added up per currency."""
    totals: dict[str, int] = defaultdict(int)
    for draft in drafts:
        amount = rules.signed_amount(draft)
        if amount is not None and not isinstance(amount, str):
            totals[amount.currency] += amount.amount_minor
    return dict(totals)
