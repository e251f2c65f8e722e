"""Draft use cases: propose (create, revise, replay), read, and expire."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

from service.actions.base import ActionContext, WriteAction
from service.approvals import repository as approvals
from service.audit import actions as audit
from service.canonical import canonical_json, params_sha256, sha256_hex
from service.drafts import repository
from service.drafts.models import OPEN_STATUSES, Draft, DraftRevision, DraftStatus, IdempotencyKey
from service.drafts.schemas import AgentDraftView, agent_view
from service.errors import Category, DomainError
from service.executions import repository as executions
from service.policies.actions import resolve
from service.policies.schemas import AppliedPolicy, PolicyConfig
from service.principal import Principal, Role
from service.validation import StrictInput


def new_draft_id() -> str:
    return "dft_" + secrets.token_hex(16)


def propose(
    ctx: ActionContext,
    action: WriteAction,
    params: StrictInput,
    *,
    policies: dict[str, PolicyConfig],
    idempotency_key: str | None = None,
    draft_id: str | None = None,
) -> AgentDraftView:
    """Record a proposed write as a draft, or revise one, or return the draft a retry refers to.

    Order matters: the idempotency key is claimed before anything else, so a
    retried call returns its draft even if the world changed since; business
    validation runs before any draft is written, so a refused proposal leaves
    nothing behind (the unit of work rolls back, the key claim included).
    """
    session, principal = ctx.session, ctx.principal
    principal.require(Role.AGENT)
    params_json = params.model_dump(mode="json", exclude_none=True)
    digest = params_sha256(params_json)
    target_id = draft_id or new_draft_id()

    claim: IdempotencyKey | None = None
    if idempotency_key is not None:
        request_sha256 = sha256_hex(canonical_json({"params": params_json, "draft_id": draft_id}))
        claim = IdempotencyKey(
            tenant=principal.tenant,
            agent=principal.subject,
            on_behalf_of=principal.on_behalf_of or "",
            action=action.name,
            key=idempotency_key,
            request_sha256=request_sha256,
            draft_id=target_id,
            created_at=ctx.now,
            expires_at=ctx.now + timedelta(seconds=ctx.settings.idempotency_retention_seconds),
        )
        held = repository.claim_idempotency_key(session, claim, now=ctx.now)
        if held is not None:
            if held.request_sha256 != request_sha256:
                raise _key_reused()
            earlier = repository.get(session, principal.tenant, held.draft_id)
            assert earlier is not None, "an idempotency key never outlives its draft"
            expire_if_due(session, earlier, now=ctx.now)
            return view(session, action, earlier, replayed=True)

    preview = action.validate(ctx, params)
    policy = resolve(
        policies,
        action.name,
        amount=preview.amount,
        default_ttl_seconds=ctx.settings.default_draft_ttl_seconds,
    )
    fields: dict[str, Any] = {
        "params": params_json,
        "params_sha256": digest,
        "summary": preview.summary,
        "amount_minor": preview.amount.amount_minor if preview.amount else None,
        "currency": preview.amount.currency if preview.amount else None,
        "risk": preview.risk.value,
        "policy": policy.model_dump(),
    }
    if draft_id is not None:
        draft, replayed = _revise(ctx, action, draft_id, fields, policy)
    else:
        draft, replayed = _create(ctx, action, target_id, fields, policy, idempotency_key)
    if claim is not None and draft.id != target_id:
        # An identical open draft was returned instead: the key refers to that one.
        repository.repoint_idempotency_key(session, claim, draft.id)
    return view(session, action, draft, replayed=replayed)


def _create(
    ctx: ActionContext,
    action: WriteAction,
    draft_id: str,
    fields: dict[str, Any],
    policy: AppliedPolicy,
    idempotency_key: str | None,
) -> tuple[Draft, bool]:
    session, principal = ctx.session, ctx.principal
    dedupe_key = _dedupe_key(principal, action.name, fields["params_sha256"])
    existing = repository.by_open_dedupe_key(session, dedupe_key)
    if existing is not None and not expire_if_due(session, existing, now=ctx.now):
        return existing, True
    draft = Draft(
        id=draft_id,
        tenant=principal.tenant,
        action=action.name,
        contract_version=action.contract_version,
        revision=1,
        approvals_required=policy.approvals_required,
        proposed_by=principal.subject,
        on_behalf_of=principal.on_behalf_of,
        trace_id=ctx.trace_id,
        idempotency_key=idempotency_key,
        status=DraftStatus.PROPOSED.value,
        open_dedupe_key=dedupe_key,
        created_at=ctx.now,
        updated_at=ctx.now,
        expires_at=ctx.now + timedelta(seconds=policy.ttl_seconds),
        **fields,
    )
    if not repository.insert_draft_unless_duplicate(session, draft):
        # A concurrent identical proposal committed first: return that one.
        winner = repository.by_open_dedupe_key(session, dedupe_key)
        assert winner is not None
        return winner, True
    created = repository.get(session, principal.tenant, draft_id)
    assert created is not None
    _record_revision(ctx, created, event="draft.proposed")
    return created, False


def _revise(
    ctx: ActionContext,
    action: WriteAction,
    draft_id: str,
    fields: dict[str, Any],
    policy: AppliedPolicy,
) -> tuple[Draft, bool]:
    session, principal = ctx.session, ctx.principal
    draft = repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None or not _proposed_by(draft, principal):
        raise draft_unavailable()
    if draft.action != action.name:
        raise DomainError(
            "DRAFT_ACTION_MISMATCH",
            Category.CONFLICT,
            f"Draft {draft.id} proposes {draft.action}; a draft's action can never change.",
            suggested_action=f"Revise it with propose_{draft.action}, or propose a new draft "
            "without draft_id.",
        )
    if expire_if_due(session, draft, now=ctx.now) or draft.status != DraftStatus.PROPOSED:
        raise DomainError(
            "DRAFT_NOT_REVISABLE",
            Category.CONFLICT,
            f"Draft {draft.id} is {draft.status}; only a draft still waiting for approval "
            "can be revised.",
            suggested_action="Propose a new draft without draft_id if the change is still wanted.",
        )
    if fields["params_sha256"] == draft.params_sha256:
        return draft, True  # nothing changed: the same revision stands
    dedupe_key = _dedupe_key(principal, action.name, fields["params_sha256"])
    twin = repository.by_open_dedupe_key(session, dedupe_key)
    if twin is not None and not expire_if_due(session, twin, now=ctx.now):
        raise DomainError(
            "DUPLICATE_OPEN_DRAFT",
            Category.CONFLICT,
            f"Draft {twin.id} already proposes exactly these arguments and is still open.",
            suggested_action=f"Use draft {twin.id} instead of revising this one.",
            details={"draft_id": twin.id},
        )
    for name, value in fields.items():
        setattr(draft, name, value)
    draft.revision += 1
    draft.approvals_required = policy.approvals_required
    draft.open_dedupe_key = dedupe_key
    draft.trace_id = ctx.trace_id or draft.trace_id
    draft.updated_at = ctx.now
    draft.expires_at = ctx.now + timedelta(seconds=policy.ttl_seconds)
    session.add(draft)
    session.flush()
    _record_revision(ctx, draft, event="draft.revised")
    return draft, False


def _record_revision(ctx: ActionContext, draft: Draft, *, event: str) -> None:
    repository.add_revision(
        ctx.session,
        DraftRevision(
            draft_id=draft.id,
            revision=draft.revision,
            params=draft.params,
            params_sha256=draft.params_sha256,
            summary=draft.summary,
            amount_minor=draft.amount_minor,
            currency=draft.currency,
            risk=draft.risk,
            policy=draft.policy,
            trace_id=ctx.trace_id,
            created_at=ctx.now,
        ),
    )
    audit.record(
        ctx.session,
        tenant=draft.tenant,
        actor=ctx.principal.actor,
        type=event,
        draft_id=draft.id,
        trace_id=ctx.trace_id,
        data={
            "action": draft.action,
            "contract_version": draft.contract_version,
            "revision": draft.revision,
            "params_sha256": draft.params_sha256,
            "summary": draft.summary,
            "amount_minor": draft.amount_minor,
            "currency": draft.currency,
            "risk": draft.risk,
            "approvals_required": draft.approvals_required,
            "policy": draft.policy["rule"],
            "on_behalf_of": draft.on_behalf_of,
            "expires_at": draft.expires_at.isoformat(),
        },
    )


def get_for_agent(
    ctx: ActionContext, writes: Mapping[str, WriteAction], draft_id: str
) -> AgentDraftView:
    """A draft proposed for the same end user as the caller's; anything else is unavailable."""
    draft = repository.get(ctx.session, ctx.principal.tenant, draft_id)
    if draft is None or not _proposed_for_same_user(draft, ctx.principal):
        raise draft_unavailable()
    expire_if_due(ctx.session, draft, now=ctx.now)
    return view(ctx.session, writes.get(draft.action), draft)


def view(
    session: Session, action: WriteAction | None, draft: Draft, *, replayed: bool = False
) -> AgentDraftView:
    execution = executions.for_draft(session, draft.id)
    return agent_view(
        draft,
        masked_params=masked_params(action, draft.params),
        approvals_received=approvals.count_approvals(session, draft.id, draft.revision),
        replayed=replayed,
        outcome=execution.outcome if execution is not None else None,
    )


def masked_params(action: WriteAction | None, params: dict[str, Any]) -> dict[str, Any]:
    """Stored params re-read through the action's model and masked; nothing if that fails."""
    if action is None:
        return {}
    try:
        return action.masked(action.Input.model_validate_json(json.dumps(params)))
    except ValidationError:
        return {}


def expire_if_due(session: Session, draft: Draft, *, now: datetime) -> bool:
    """Mark an open draft past its ``expires_at`` as expired (deny by default). True if expired."""
    if draft.status == DraftStatus.EXPIRED:
        return True
    if DraftStatus(draft.status) not in OPEN_STATUSES or now < draft.expires_at:
        return False
    draft.status = DraftStatus.EXPIRED.value
    draft.status_reason = "it was not approved and executed before it expired"
    draft.open_dedupe_key = None
    draft.updated_at = now
    session.add(draft)
    session.flush()
    audit.record(
        session,
        tenant=draft.tenant,
        actor="system:expiry",
        type="draft.expired",
        draft_id=draft.id,
        data={"revision": draft.revision, "expired_at": draft.expires_at.isoformat()},
    )
    return True


def draft_unavailable() -> DomainError:
    return DomainError(
        "DRAFT_UNAVAILABLE",
        Category.UNAVAILABLE,
        "No draft with that id is available to you.",
        suggested_action="Check the draft_id returned by the propose call; do not guess ids.",
    )


def _key_reused() -> DomainError:
    return DomainError(
        "IDEMPOTENCY_KEY_REUSED",
        Category.CONFLICT,
        "This idempotency key was already used for a different request.",
        retryable=False,
        suggested_action="Use a new idempotency key for a different request; reuse a key only "
        "to retry exactly the same call.",
    )


def _dedupe_key(principal: Principal, action: str, digest: str) -> str:
    scope = [principal.tenant, principal.subject, principal.on_behalf_of, action, digest]
    return sha256_hex(canonical_json(scope))


def _proposed_by(draft: Draft, principal: Principal) -> bool:
    return draft.proposed_by == principal.subject and draft.on_behalf_of == principal.on_behalf_of


def _proposed_for_same_user(draft: Draft, principal: Principal) -> bool:
    return draft.on_behalf_of == principal.on_behalf_of
