"""Draft use cases for agents: propose (create, revise, replay) and read their own drafts."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlmodel import Session

from service.approvals import progress
from service.audit import actions as audit
from service.canonical import canonical_json, params_sha256, sha256_hex
from service.cursors import CursorCodec
from service.drafts import errors, repository, state
from service.drafts.models import (
    FINAL_STATUSES,
    Draft,
    DraftRevision,
    DraftStatus,
    IdempotencyKey,
)
from service.drafts.policy import applied_policy
from service.drafts.schemas import (
    AgentDraftListing,
    AgentDraftPage,
    AgentDraftView,
    agent_view,
    draft_uri,
)
from service.drafts.state import expire_if_due, reason_at, status_at
from service.executions import repository as executions
from service.grants import actions as grants
from service.policies.schemas import AppliedPolicy, PolicyConfig
from service.principal import Principal, Role
from service.registry.base import ActionContext, SourceState, WriteAction
from service.validation import StrictInput


def new_draft_id() -> str:
    return "dft_" + secrets.token_hex(16)


@dataclass(frozen=True)
class Proposal:
    """One propose call, validated: what would be written, and under which policy."""

    action: WriteAction
    fields: dict[str, Any]  # the Draft columns a revision sets
    policy: AppliedPolicy

    @property
    def params_sha256(self) -> str:
        return str(self.fields["params_sha256"])


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
    ctx.principal.require(Role.AGENT)
    params_json = params.model_dump(mode="json", exclude_none=True)
    target_id = draft_id or new_draft_id()
    claim: IdempotencyKey | None = None
    if idempotency_key is not None:
        claimed = _claim_key(ctx, action, idempotency_key, params_json, draft_id, target_id)
        if isinstance(claimed, Draft):
            rules = progress.Rules({action.name: action}, policies, ctx.settings)
            return view(ctx.session, action, claimed, rules=rules, now=ctx.now, replayed=True)
        claim = claimed
    proposal = _validate(ctx, action, params, params_json, policies, target_id)
    if draft_id is not None:
        draft, replayed = _revise(ctx, draft_id, proposal)
    else:
        draft, replayed = _create(ctx, target_id, proposal, idempotency_key)
    if claim is not None and draft.id != target_id:
        # An identical open draft was returned instead: the key refers to that one.
        repository.repoint_idempotency_key(ctx.session, claim, draft.id)
    rules = progress.Rules({action.name: action}, policies, ctx.settings)
    covered = False
    if not replayed:
        draft, covered = grants.cover(ctx.session, rules, draft, now=ctx.now, trace_id=ctx.trace_id)
    # A revision written just now has no approvals (unless a grant covered it) and no
    # execution yet.
    new = not replayed and not covered
    return view(ctx.session, action, draft, rules=rules, now=ctx.now, replayed=replayed, new=new)


def _claim_key(
    ctx: ActionContext,
    action: WriteAction,
    key: str,
    params_json: dict[str, Any],
    draft_id: str | None,
    target_id: str,
) -> IdempotencyKey | Draft:
    """Claim the key for this request, or return the draft an earlier identical request made."""
    principal = ctx.principal
    request_sha256 = sha256_hex(canonical_json({"params": params_json, "draft_id": draft_id}))
    claim = IdempotencyKey(
        tenant=principal.tenant,
        agent=principal.subject,
        on_behalf_of=principal.on_behalf_of or "",
        action=action.name,
        key=key,
        request_sha256=request_sha256,
        draft_id=target_id,
        created_at=ctx.now,
        expires_at=ctx.now + timedelta(seconds=ctx.settings.idempotency_retention_seconds),
    )
    held = repository.claim_idempotency_key(ctx.session, claim, now=ctx.now)
    if held is None:
        return claim
    if held.request_sha256 != request_sha256:
        raise errors.idempotency_key_reused()
    earlier = repository.get(ctx.session, principal.tenant, held.draft_id)
    assert earlier is not None, "an idempotency key never outlives its draft"
    expire_if_due(ctx.session, earlier, now=ctx.now)
    return earlier


def _validate(
    ctx: ActionContext,
    action: WriteAction,
    params: StrictInput,
    params_json: dict[str, Any],
    policies: dict[str, PolicyConfig],
    draft_id: str,
) -> Proposal:
    """Business validation against current state, and the policy its amount falls under."""
    preview = action.validate(ctx, params)
    source = action.source(ctx, params)
    policy, policy_key = applied_policy(
        ctx.session,
        policies,
        action.name,
        tenant=ctx.principal.tenant,
        params=params_json,
        amount=preview.amount,
        default_ttl_seconds=ctx.settings.default_draft_ttl_seconds,
        as_of=ctx.now,
        draft_id=draft_id,
    )
    fields: dict[str, Any] = {
        "params": params_json,
        "params_sha256": params_sha256(params_json),
        "summary": preview.summary,
        "amount_minor": preview.amount.amount_minor if preview.amount else None,
        "currency": preview.amount.currency if preview.amount else None,
        "risk": preview.risk.value,
        "policy": policy.model_dump(),
        "approvals_required": policy.approvals_required,
        "policy_key": policy_key,
        "expires_at": ctx.now + timedelta(seconds=policy.ttl_seconds),
        **source_fields(source),
    }
    return Proposal(action=action, fields=fields, policy=policy)


def source_fields(source: SourceState | None) -> dict[str, Any]:
    """The draft columns that record the source a revision is proposed against."""
    if source is None:
        return {"source_ref": None, "source_revision": None, "source": None}
    return {
        "source_ref": source.ref,
        "source_revision": source.revision,
        "source": source.recorded(),
    }


def _create(
    ctx: ActionContext, draft_id: str, proposal: Proposal, idempotency_key: str | None
) -> tuple[Draft, bool]:
    session, action = ctx.session, proposal.action
    draft = state.proposed(
        draft_id,
        proposer=ctx.principal,
        action=action.name,
        contract_version=action.contract_version,
        fields=proposal.fields,
        now=ctx.now,
        trace_id=ctx.trace_id,
        idempotency_key=idempotency_key,
    )
    dedupe_key = draft.open_dedupe_key
    assert dedupe_key is not None
    # Insert first, look only on a conflict: an identical open draft is the rare case.
    inserted = repository.insert_draft_unless_duplicate(session, draft)
    if not inserted:
        existing = repository.by_open_dedupe_key(session, dedupe_key)
        if existing is not None and not expire_if_due(session, existing, now=ctx.now):
            return existing, True  # an identical open draft, perhaps a concurrent one's
        # It was past its time and is expired now (its dedupe key released): take its place.
        inserted = repository.insert_draft_unless_duplicate(session, draft)
    if not inserted:
        # A concurrent identical proposal committed first: return that one.
        winner = repository.by_open_dedupe_key(session, dedupe_key)
        assert winner is not None
        return winner, True
    _record_revision(ctx, draft, event="draft.proposed")
    return draft, False


def _revise(ctx: ActionContext, draft_id: str, proposal: Proposal) -> tuple[Draft, bool]:
    session, principal, action = ctx.session, ctx.principal, proposal.action
    draft = repository.get(session, principal.tenant, draft_id, for_update=True)
    if draft is None or not _proposed_by(draft, principal):
        raise errors.draft_unavailable()
    if draft.action != action.name:
        raise errors.draft_action_mismatch(draft.id, draft.action)
    if expire_if_due(session, draft, now=ctx.now) or draft.status is not DraftStatus.PROPOSED:
        raise errors.draft_not_revisable(draft.id, draft.status.value)
    if (proposal.params_sha256, proposal.fields["source_revision"]) == (
        draft.params_sha256,
        draft.source_revision,
    ):
        return draft, True  # nothing changed: the same revision stands
    _refuse_twin(ctx, draft, proposal)
    state.revise(
        session,
        draft,
        proposer=principal,
        contract_version=action.contract_version,
        fields=proposal.fields,
        now=ctx.now,
        trace_id=ctx.trace_id,
    )
    _record_revision(ctx, draft, event="draft.revised")
    return draft, False


def _refuse_twin(ctx: ActionContext, draft: Draft, proposal: Proposal) -> None:
    """DUPLICATE_OPEN_DRAFT if another open draft of the proposer holds the same params: the
    draft's new revision would duplicate it (one expired but not yet swept does not count)."""
    key = state.dedupe_key(ctx.principal, proposal.action.name, proposal.params_sha256)
    twin = repository.by_open_dedupe_key(ctx.session, key)
    if twin is None or twin.id == draft.id:
        return
    if not expire_if_due(ctx.session, twin, now=ctx.now):
        raise errors.duplicate_open_draft(twin.id)


def rebase(
    ctx: ActionContext,
    action: WriteAction,
    draft: Draft,
    *,
    policies: dict[str, PolicyConfig],
    actor: str,
    reason: str,
    data: dict[str, Any],
) -> None:
    """The draft, revalidated against its source as it stands now, at a new revision that
    must be approved again (drafts.state.rebase). A change that no longer holds raises its
    business error and nothing is written; so does an identical open draft of the same
    proposer (DUPLICATE_OPEN_DRAFT), which the new revision would duplicate."""
    params = action.Input.model_validate_json(json.dumps(draft.params))
    proposal = _validate(ctx, action, params, draft.params, policies, draft.id)
    _refuse_twin(ctx, draft, proposal)
    left = state.rebase(
        ctx.session,
        draft,
        proposer=ctx.principal,
        fields=proposal.fields,
        now=ctx.now,
        reason=reason,
    )
    _record_revision(
        ctx,
        draft,
        event="draft.rebased",
        actor=actor,
        extra={"from": left.value, "reason": reason, **data},
    )
    rules = progress.Rules({action.name: action}, policies, ctx.settings)
    grants.cover(ctx.session, rules, draft, now=ctx.now, trace_id=ctx.trace_id)


def narrow(
    ctx: ActionContext,
    action: WriteAction,
    draft: Draft,
    params: StrictInput,
    *,
    policies: dict[str, PolicyConfig],
    by: Principal,
) -> None:
    """The draft at a new revision with ``params``, which the approver ``by`` narrowed it to
    (the caller checked it is narrowing: ``WriteAction.narrowing_problem``), validated against
    the world as it stands and under the policy for its amount, like any proposal; its status
    reason tells the agent the narrowed terms. ``ctx``: the draft's proposer, for whom the
    action validates."""
    params_json = params.model_dump(mode="json", exclude_none=True)
    proposal = _validate(ctx, action, params, params_json, policies, draft.id)
    _refuse_twin(ctx, draft, proposal)
    # Never fewer approvers than the revision it narrows needed: a lower amount must not let
    # its one approver slip under a tier and approve alone what needed two.
    needed = max(int(proposal.fields["approvals_required"]), draft.approvals_required)
    proposal.fields["approvals_required"] = needed
    proposal.fields["policy"] = {**proposal.fields["policy"], "approvals_required": needed}
    summary = str(proposal.fields["summary"]).rstrip(".")
    reason = f"an approver ({by.subject}) narrowed it to: {summary}"
    state.revise(
        ctx.session,
        draft,
        proposer=ctx.principal,
        contract_version=action.contract_version,
        fields=proposal.fields,
        now=ctx.now,
        trace_id=ctx.trace_id,
        reason=reason,
    )
    _record_revision(ctx, draft, event="draft.narrowed", actor=by.actor, extra={"reason": reason})


def _record_revision(
    ctx: ActionContext,
    draft: Draft,
    *,
    event: str,
    actor: str | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
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
            source_revision=draft.source_revision,
            source=draft.source,
            trace_id=ctx.trace_id,
            created_at=ctx.now,
        ),
    )
    audit.record(
        ctx.session,
        tenant=draft.tenant,
        actor=actor or ctx.principal.actor,
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
            "source_ref": draft.source_ref,
            "source_revision": draft.source_revision,
            **(extra or {}),
        },
    )


def get_for_agent(
    ctx: ActionContext,
    writes: Mapping[str, WriteAction],
    draft_id: str,
    *,
    policies: dict[str, PolicyConfig],
) -> AgentDraftView:
    """A draft the caller proposed (same agent, same end user); anything else is unavailable,
    exactly like an id that does not exist."""
    draft = _own_draft(ctx, draft_id)
    rules = progress.Rules(writes, policies, ctx.settings)
    return view(ctx.session, writes.get(draft.action), draft, rules=rules, now=ctx.now)


AGENT_PAGE_CURSOR = "agent-drafts"


def unfinished_for_agent(
    ctx: ActionContext, cursors: CursorCodec, *, cursor: str | None, limit: int
) -> AgentDraftPage:
    """The caller's own drafts that have not ended yet, newest first, a page at a time."""
    ctx.principal.require(Role.AGENT)
    after = None
    if cursor is not None:
        after = repository.newest_first_after(cursors, AGENT_PAGE_CURSOR, cursor)
    rows = repository.unfinished_page(
        ctx.session,
        ctx.principal.tenant,
        proposed_by=ctx.principal.subject,
        on_behalf_of=ctx.principal.on_behalf_of,
        after=after,
        limit=limit + 1,
        now=ctx.now,
    )
    more, rows = len(rows) > limit, rows[:limit]
    return AgentDraftPage(
        drafts=[
            AgentDraftListing(
                draft_id=draft.id,
                resource_uri=draft_uri(draft.id),
                action=draft.action,
                status=status_at(draft, ctx.now),
                revision=draft.revision,
                summary=draft.summary,
                created_at=draft.created_at,
            )
            for draft in rows
        ],
        next_cursor=repository.newest_first_cursor(cursors, AGENT_PAGE_CURSOR, rows[-1])
        if more
        else None,
    )


def withdraw(
    ctx: ActionContext,
    writes: Mapping[str, WriteAction],
    draft_id: str,
    *,
    revision: int | None = None,
    policies: dict[str, PolicyConfig],
) -> AgentDraftView:
    """The proposer takes back a draft nobody has approved yet (MCP ``tasks/cancel``).

    A draft that already ended stays as it ended (withdrawing it again changes nothing), and
    so does one revised past ``revision`` (the caller meant an earlier one); one a quorum
    approved is refused with the reason: only an approver can stop it now."""
    draft = _own_draft(ctx, draft_id, for_update=True)  # an approval may race it
    current = revision is None or revision == draft.revision
    if current and not expire_if_due(ctx.session, draft, now=ctx.now):
        if draft.status is DraftStatus.PROPOSED:
            state.transition(
                ctx.session,
                draft,
                DraftStatus.WITHDRAWN,
                now=ctx.now,
                actor=ctx.principal.actor,
                trace_id=ctx.trace_id,
                reason="its proposer withdrew it before it was approved",
            )
        elif draft.status not in FINAL_STATUSES:
            raise errors.draft_not_withdrawable(draft.id, draft.status.value)
    rules = progress.Rules(writes, policies, ctx.settings)
    return view(ctx.session, writes.get(draft.action), draft, rules=rules, now=ctx.now)


def _own_draft(ctx: ActionContext, draft_id: str, *, for_update: bool = False) -> Draft:
    """The caller's own draft, or DRAFT_UNAVAILABLE (another tenant's, agent's or end user's
    draft answers exactly like one that does not exist)."""
    ctx.principal.require(Role.AGENT)
    draft = repository.get(ctx.session, ctx.principal.tenant, draft_id, for_update=for_update)
    if draft is None or not _proposed_by(draft, ctx.principal):
        raise errors.draft_unavailable()
    return draft


def view(
    session: Session,
    action: WriteAction | None,
    draft: Draft,
    *,
    rules: progress.Rules,
    now: datetime,
    replayed: bool = False,
    new: bool = False,
) -> AgentDraftView:
    """What the agent sees of ``draft``, its approvals counted as the execute gate counts
    them. ``new``: its revision was written by this unit of work, so there is nothing to
    look up (approvals and executions come only after it)."""
    execution = None if new else executions.for_draft(session, draft.id)
    return agent_view(
        draft,
        status=status_at(draft, now),
        reason=reason_at(draft, now),
        masked_params=masked_params(action, draft.params),
        standing=progress.of_draft(session, rules, draft, new=new),
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


def _proposed_by(draft: Draft, principal: Principal) -> bool:
    return draft.proposed_by == principal.subject and draft.on_behalf_of == principal.on_behalf_of
