"""Narrow on approve (issue 21.3, docs/approvals.md "Narrowing"): instead of rejecting, an
approver lowers a draft's amount (or drops an effect its action declares droppable); the
draft gets a new revision with those params, which the approver approves in the same step
with their signature over it. Nothing else may change; the agent is told the narrowed terms.

Maker ≠ checker holds unchanged: the draft's proposer stays its agent (and end user), and the
narrowing approver counts once, as any approver does (docs/decisions/narrowing-signed-by-
its-author.md). A narrowing can only take power away, so its author may sign it; anything
else is refused outright, before any revision is written.
"""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import ValidationError
from sqlmodel import Session

from service.approvals import actions, errors, oversight, progress, signatures
from service.approvals.schemas import ApprovalStatement, Decision, NarrowRequest
from service.drafts import actions as drafts
from service.drafts.models import Draft
from service.drafts.world import as_proposer
from service.principal import Principal, Role
from service.registry.base import ActionContext, WriteAction
from service.runtime import Runtime
from service.validation import StrictInput, parse


def narrow(
    session: Session,
    principal: Principal,
    *,
    runtime: Runtime,
    draft_id: str,
    request: NarrowRequest,
    now: datetime,
    trace_id: str | None = None,
) -> Draft:
    """Write the narrowed revision and record its author's signed approval of it, or refuse
    (nothing is written then)."""
    principal.require(Role.APPROVER)
    statement = request.statement
    _check_statement(principal, runtime, draft_id, statement, now=now)
    key = signatures.verify_request(
        session,
        principal,
        request,
        statement,
        settings=runtime.settings,
        now=now,
    )
    draft = actions.lock_open_draft(session, principal, draft_id, Decision.APPROVE, now=now)
    actions.check_contract(runtime, draft)
    action = runtime.registry.write(draft.action)
    assert action is not None  # check_contract: the action is registered
    after = _narrowed(action, draft, request)
    rules = progress.Rules.of(runtime)
    actions.check_signer(progress.of_draft(session, rules, draft), principal, Decision.APPROVE)
    ctx = _as_its_proposer(session, runtime, draft, principal, now=now)
    drafts.narrow(ctx, action, draft, after, policies=runtime.policies, by=principal)
    oversight.carry_view(session, draft, principal.subject, from_revision=draft.revision - 1)
    # The statement must approve exactly the revision just written.
    actions.check_binding(draft, statement)
    actions.record_decision(
        session,
        rules,
        principal,
        draft,
        key,
        request,
        actions.Signed.of(statement),
        now=now,
        trace_id=trace_id,
    )
    # Approved at once when its author's approval meets the policy: the agent still reads why.
    actions.settle(
        session, rules, draft, actor=principal.actor, now=now, trace_id=trace_id,
        reason=draft.status_reason,
    )  # fmt: skip
    return draft


def _narrowed(action: WriteAction, draft: Draft, request: NarrowRequest) -> StrictInput:
    """The params sent, validated, if they narrow the draft's; else NARROWING_REFUSED."""
    try:
        before = action.Input.model_validate_json(json.dumps(draft.params))
    except ValidationError:
        raise errors.narrowing_refused(
            "the draft's stored params are not valid for its action"
        ) from None
    after = parse(action.Input, request.params)
    problem = action.narrowing_problem(before, after)
    if problem:
        raise errors.narrowing_refused(problem)
    return after


def _as_its_proposer(
    session: Session, runtime: Runtime, draft: Draft, approver: Principal, *, now: datetime
) -> ActionContext:
    """The action validates the narrowed params for the draft's proposer, in its trace."""
    return ActionContext(
        session=session,
        principal=as_proposer(draft, token_id=f"narrowed-by:{approver.subject}"),
        settings=runtime.settings,
        now=now,
        trace_id=draft.trace_id,
    )


def _check_statement(
    principal: Principal,
    runtime: Runtime,
    draft_id: str,
    statement: ApprovalStatement,
    *,
    now: datetime,
) -> None:
    if statement.draft_id != draft_id:
        raise errors.statement_for_other_draft()
    actions.check_signer_identity(principal, tenant=statement.tenant, approver=statement.approver)
    if statement.decision is not Decision.APPROVE:
        raise errors.narrowing_refused("a narrowing is approved, not rejected")
    actions.check_freshness(
        statement.issued_at, now=now, skew_seconds=runtime.settings.approval_clock_skew_seconds
    )
