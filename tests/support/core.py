"""Acting as an approver straight through the core (no HTTP), for tests of what comes after."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.approvals import signed_decision
from service.approvals import actions as approvals
from service.approvals.schemas import ApprovalRequest, Decision, signed_request
from service.db import session_scope
from service.drafts import repository as drafts_repository
from service.executions import actions as executions
from service.executions.models import Execution
from service.grants import actions as grants
from service.grants.schemas import GrantRequest, GrantTerms
from service.runtime import Runtime
from service.signing import key_id_for, load_private_key, public_key_b64
from service.sql import utcnow
from service.tokens import actions as tokens
from service.validation import parse


def approve_in_core(
    runtime: Runtime, demo: dict[str, Any], draft_id: str, approver: str = "alice"
) -> None:
    """Sign and submit an approval exactly as the API would, through the core."""
    decide_in_core(runtime, demo, draft_id, approver)


def reject_in_core(
    runtime: Runtime, demo: dict[str, Any], draft_id: str, reason: str, approver: str = "bob"
) -> None:
    """Sign and submit a rejection with ``reason``, through the core."""
    decide_in_core(runtime, demo, draft_id, approver, Decision.REJECT, reason)


def decide_in_core(
    runtime: Runtime,
    demo: dict[str, Any],
    draft_id: str,
    approver: str,
    decision: Decision = Decision.APPROVE,
    reason: str | None = None,
    shown: Mapping[str, Any] | None = None,
) -> None:
    """Sign ``decision`` on the draft's current revision as ``approver`` and submit it.
    ``shown``: fields the approver was shown otherwise than stored (a stale or a missing
    source revision, say)."""
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"][f"approver_{approver}"])
        draft = drafts_repository.get(session, "demo", draft_id)
        assert draft is not None
        body = signed_decision(
            {
                "tenant": draft.tenant,
                "draft_id": draft.id,
                "revision": draft.revision,
                "action": draft.action,
                "contract_version": draft.contract_version,
                "params_sha256": draft.params_sha256,
                "source_revision": draft.source_revision,
                **(shown or {}),
            },
            approver=approver,
            key_file=demo["approvers"][approver]["private_key_file"],
            decision=decision,
            reason=reason,
        )
        approvals.submit(
            session,
            principal,
            draft_id=draft_id,
            request=parse(ApprovalRequest, body),
            runtime=runtime,
            now=utcnow(),
        )


def request_execution_in_core(
    runtime: Runtime, demo: dict[str, Any], draft_id: str
) -> tuple[Execution, bool]:
    """Request execution as alice, without publishing (what a request that died after its
    commit leaves behind); returns (execution, created)."""
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        return executions.request(
            session, principal, draft_id=draft_id, runtime=runtime, now=utcnow()
        )


def grant_in_core(
    runtime: Runtime, demo: dict[str, Any], approver: str = "alice", **terms: Any
) -> str:
    """Sign and record a standing grant of ``terms`` (GrantTerms) as ``approver``, through
    the core; returns its id."""
    with session_scope(runtime.engine) as session:
        principal = tokens.authenticate(session, demo["tokens"][f"approver_{approver}"])
        now = utcnow()
        asked = parse(GrantTerms, {"action": "refund", "duration_seconds": 86_400, **terms})
        offered = grants.to_sign(session, principal, asked, runtime=runtime, now=now)
        key = load_private_key(Path(demo["approvers"][approver]["private_key_file"]))
        statement = {**offered.statement, "key_id": key_id_for(public_key_b64(key))}
        request = parse(GrantRequest, signed_request(statement, key))
        return grants.create(session, principal, request, runtime=runtime, now=now).grant_id
