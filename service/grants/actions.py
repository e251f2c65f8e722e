"""Standing-grant use cases: what to sign, recording a signed grant, revoking and listing
grants, and covering a draft's new revision with a grant standing for it.

A grant counts as its approver's approval of the drafts it covered, through the progress
owner (``service.approvals.progress``), which re-checks its signature, its terms and its
caps on every count: the execute gate's and the worker's under the draft's lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.approvals import actions as approvals
from service.approvals import progress, signatures
from service.approvals.schemas import SCHEME_ED25519, SCHEME_WEBAUTHN, moment
from service.audit import actions as audit
from service.drafts import repository as drafts_repository
from service.drafts.models import Draft, DraftStatus
from service.grants import errors, repository, terms
from service.grants.models import Grant, GrantUse
from service.grants.proof import statement_of
from service.grants.schemas import (
    GRANT_STATEMENT_TYPE,
    GrantPage,
    GrantRequest,
    GrantStatement,
    GrantTerms,
    GrantToSign,
    GrantView,
    grant_id_of,
)
from service.money import AmountView, Money
from service.policies.schemas import GrantRules
from service.principal import Principal, Role
from service.runtime import Runtime
from service.sql import rfc3339_seconds

LISTED = 200
COVERED_SHOWN = 50


def to_sign(
    session: Session, principal: Principal, asked: GrantTerms, *, runtime: Runtime, now: datetime
) -> GrantToSign:
    """The grant statement for the terms asked, in words, ready for the caller to sign."""
    principal.require(Role.APPROVER)
    rules = _grant_rules(runtime, asked.action)
    start = moment(asked.not_before) if asked.not_before else now
    _check_start(start, now, rules)
    statement: dict[str, Any] = {
        **asked.model_dump(exclude_none=True, exclude={"duration_seconds", "not_before"}),
        "type": GRANT_STATEMENT_TYPE,
        "tenant": principal.tenant,
        "approver": principal.subject,
        "key_id": approvals.own_key_id(session, principal),
        "not_before": rfc3339_seconds(start),
        "expires_at": rfc3339_seconds(start + timedelta(seconds=asked.duration_seconds)),
        "issued_at": rfc3339_seconds(now),
    }
    parsed = GrantStatement.model_validate({**statement, "key_id": statement["key_id"] or "?"})
    problem = terms.duration_problem(parsed, rules.max_seconds)
    if problem:
        raise errors.grant_too_long(problem)
    key_id = statement["key_id"]
    return GrantToSign(
        statement=statement,
        words=parsed.words(),
        grant_id=grant_id_of(statement) if key_id else None,
    )


def create(
    session: Session,
    principal: Principal,
    request: GrantRequest,
    *,
    runtime: Runtime,
    now: datetime,
    trace_id: str | None = None,
) -> GrantView:
    """Record a grant its approver signed, or refuse it (nothing is recorded then)."""
    principal.require(Role.APPROVER)
    statement = request.statement
    approvals.check_signer_identity(principal, tenant=statement.tenant, approver=statement.approver)
    _check_terms(runtime, statement, now)
    key = signatures.verify_request(
        session,
        principal,
        request,
        statement,
        settings=runtime.settings,
        now=now,
    )
    grant = _grant_row(statement, request, key_id=key.key_id, now=now)
    if not repository.insert_unless_recorded(session, grant):
        raise errors.grant_exists(grant.id)
    audit.record(
        session,
        tenant=grant.tenant,
        actor=principal.actor,
        type="grant.created",
        trace_id=trace_id,
        data={
            "grant_id": grant.id,
            "action": grant.action,
            "key_id": grant.key_id,
            "scheme": grant.scheme,
            "words": statement.words(),
            "not_before": statement.not_before,
            "expires_at": statement.expires_at,
            "issued_at": statement.issued_at,
        },
    )
    return _view(grant, [], now)


def _grant_row(
    statement: GrantStatement, request: GrantRequest, *, key_id: str, now: datetime
) -> Grant:
    webauthn = request.webauthn
    start, end = statement.window
    signed = statement.signed_value()
    return Grant(
        id=grant_id_of(signed),
        tenant=statement.tenant,
        action=statement.action,
        approver=statement.approver,
        key_id=key_id,
        statement=signed,
        signature=webauthn.signature if webauthn else str(request.signature),
        scheme=SCHEME_WEBAUTHN if webauthn else SCHEME_ED25519,
        authenticator_data=webauthn.authenticator_data if webauthn else None,
        client_data_json=webauthn.client_data_json if webauthn else None,
        not_before=start,
        expires_at=end,
        created_at=now,
    )


def _check_terms(runtime: Runtime, statement: GrantStatement, now: datetime) -> None:
    """Refuse a grant its action's policy does not allow (at all, or for that long), one
    expired already, or one signed further from now than the allowed clock skew."""
    rules = _grant_rules(runtime, statement.action)
    problem = terms.duration_problem(statement, rules.max_seconds)
    if problem:
        raise errors.grant_too_long(problem)
    _check_start(statement.window[0], now, rules)
    if statement.window[1] <= now:
        raise errors.grant_expired(statement.expires_at)
    approvals.check_freshness(
        statement.issued_at, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds
    )


def revoke(
    session: Session,
    principal: Principal,
    grant_id: str,
    *,
    now: datetime,
    trace_id: str | None = None,
) -> GrantView:
    """Revoke a grant (its approver or an admin): from now on it covers nothing, and what it
    covered and has not run yet does not run on it. Revoking twice changes nothing."""
    principal.require(Role.APPROVER, Role.ADMIN)
    grant = repository.get(session, principal.tenant, grant_id, for_update=True)
    if grant is None or (principal.role is Role.APPROVER and grant.approver != principal.subject):
        raise errors.grant_unavailable()
    if grant.revoked_at is None:
        grant.revoked_at, grant.revoked_by = now, principal.actor
        session.add(grant)
        audit.record(
            session,
            tenant=grant.tenant,
            actor=principal.actor,
            type="grant.revoked",
            trace_id=trace_id,
            data={"grant_id": grant.id, "action": grant.action, "approver": grant.approver},
        )
    return _view(grant, repository.uses_of_grants(session, [grant.id])[grant.id], now)


def list_grants(session: Session, principal: Principal, *, now: datetime) -> GrantPage:
    """The tenant's grants, newest first, with what each covered."""
    principal.require(Role.APPROVER, Role.AUDITOR, Role.ADMIN)
    grants = repository.listed(session, principal.tenant, limit=LISTED)
    uses = repository.uses_of_grants(session, [grant.id for grant in grants])
    return GrantPage(grants=[_view(grant, uses[grant.id], now) for grant in grants])


def cover(
    session: Session,
    rules: progress.Rules,
    draft: Draft,
    *,
    now: datetime,
    trace_id: str | None,
) -> tuple[Draft, bool]:
    """Let the first grant standing for the draft's new revision cover it, if one does: the
    progress owner decides whether it counts (its signature, key, terms, caps, maker ≠
    checker), exactly as it will when the draft is executed. A grant that covers it is
    audited as ``approval.granted``, and approves the draft if that meets its policy.
    Returns the draft as stored now, and whether a grant covered it (then its revision is
    not one nobody approved: ``progress.of_draft(new=False)``)."""
    policy = rules.policies.get(draft.action)
    amount = rules.signed_amount(draft)
    if policy is None or policy.grants is None or isinstance(amount, str):
        return draft, False
    # A draft just inserted is not in the session yet: the stored row, locked, from here on.
    stored = drafts_repository.get(session, draft.tenant, draft.id, for_update=True)
    assert stored is not None, "a draft is covered right after it is written"
    repository.release(session, stored.id)  # an earlier revision's use covers nothing now
    if stored.status is not DraftStatus.PROPOSED:
        return stored, False
    for grant in repository.standing(session, stored.tenant, stored.action, now):
        spent = repository.uses_of_grants(session, [grant.id])[grant.id]  # under its lock
        repository.add_use(session, _use(grant, stored, amount, now, after=spent))
        verdict = progress.of_draft(session, rules, stored).verdict(grant.id)
        if verdict is not None and verdict.counts:
            _record_granted(session, grant, stored, amount, trace_id=trace_id)
            approvals.settle(
                session,
                rules,
                stored,
                actor=f"grant:{grant.id}",
                now=now,
                trace_id=trace_id,
            )
            return stored, True
        repository.release(session, stored.id)
    return stored, False


def _use(
    grant: Grant, draft: Draft, amount: Money | None, now: datetime, *, after: list[GrantUse]
) -> GrantUse:
    """The grant's next use: after every use it has (``after``, read under the grant's lock),
    in order and in time, whatever this request's clock says."""
    last = after[-1] if after else None
    return GrantUse(
        draft_id=draft.id,
        grant_id=grant.id,
        seq=last.seq + 1 if last else 1,
        tenant=draft.tenant,
        revision=draft.revision,
        params_sha256=draft.params_sha256,
        amount_minor=amount.amount_minor if amount else None,
        currency=amount.currency if amount else None,
        created_at=max(now, last.created_at) if last else now,
    )


def _record_granted(
    session: Session, grant: Grant, draft: Draft, amount: Money | None, *, trace_id: str | None
) -> None:
    audit.record(
        session,
        tenant=draft.tenant,
        actor=f"grant:{grant.id}",
        type="approval.granted",
        draft_id=draft.id,
        trace_id=trace_id,
        data={
            "grant_id": grant.id,
            "revision": draft.revision,
            "approver": grant.approver,
            "key_id": grant.key_id,
            "scheme": grant.scheme,
            "params_sha256": draft.params_sha256,
            "amount_minor": amount.amount_minor if amount else None,
            "currency": amount.currency if amount else None,
        },
    )


def _check_start(start: datetime, now: datetime, rules: GrantRules) -> None:
    """A grant starts within as long from now as it may stand: one signed for a far future
    would wait, signed and forgotten, for a day nobody reviews it again."""
    if start - now > timedelta(seconds=rules.max_seconds):
        raise errors.grant_too_long("it would start later than the longest it may stand")


def _grant_rules(runtime: Runtime, action: str) -> GrantRules:
    """The action's grant rules, or GRANT_NOT_ALLOWED (also for an action that is not one)."""
    policy = runtime.policies.get(action)
    if runtime.registry.write(action) is None or policy is None or policy.grants is None:
        raise errors.grant_not_allowed(action)
    return policy.grants


def _view(grant: Grant, uses: list[GrantUse], now: datetime) -> GrantView:
    statement = statement_of(grant)  # a row written around draftgate may hold anything
    currency = statement.currency if statement else None
    return GrantView(
        grant_id=grant.id,
        action=grant.action,
        approver=grant.approver,
        key_id=grant.key_id,
        scheme=grant.scheme,
        words=statement.words() if statement else "(not a valid grant statement)",
        statement=grant.statement,
        not_before=grant.not_before,
        expires_at=grant.expires_at,
        created_at=grant.created_at,
        revoked_at=grant.revoked_at,
        revoked_by=grant.revoked_by,
        status=(
            "revoked"
            if grant.revoked_at is not None
            else "pending"
            if now < grant.not_before
            else "expired"
            if now >= grant.expires_at
            else "active"
        ),
        uses=len(uses),
        used=AmountView.of(sum(use.amount_minor or 0 for use in uses), currency)
        if currency
        else None,
        drafts=[use.draft_id for use in reversed(uses)][:COVERED_SHOWN],
    )
