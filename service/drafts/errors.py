"""Every error a draft use case raises."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

DRAFT_UNAVAILABLE = ErrorCode(
    "DRAFT_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No draft with that id exists in the caller's tenant, or it was proposed for another end "
    "user (the two are deliberately indistinguishable).",
    "Check the draft_id returned by the propose call; do not guess ids.",
)
IDEMPOTENCY_KEY_REUSED = ErrorCode(
    "IDEMPOTENCY_KEY_REUSED",
    Category.CONFLICT,
    "The idempotency key was already used, within its retention, for a different request.",
    "Use a new idempotency key for a different request; reuse a key only to retry exactly the "
    "same call.",
    retryable=False,
)
DRAFT_ACTION_MISMATCH = ErrorCode(
    "DRAFT_ACTION_MISMATCH",
    Category.CONFLICT,
    "A revision was proposed with a different propose_* tool than the draft's; a draft's action "
    "never changes.",
    "Revise the draft with the propose_* tool of its own action, or propose a new draft.",
)
DRAFT_NOT_REVISABLE = ErrorCode(
    "DRAFT_NOT_REVISABLE",
    Category.CONFLICT,
    "Only a draft still waiting for approval can be revised.",
    "Propose a new draft without draft_id if the change is still wanted.",
)
DUPLICATE_OPEN_DRAFT = ErrorCode(
    "DUPLICATE_OPEN_DRAFT",
    Category.CONFLICT,
    "A revision would make this draft identical to another open draft of the same proposer.",
    "Use the other draft instead of revising this one.",
)


DRAFT_NOT_WITHDRAWABLE = ErrorCode(
    "DRAFT_NOT_WITHDRAWABLE",
    Category.PRECONDITION_FAILED,
    "Only a draft still waiting for approval can be withdrawn: once a quorum of humans approved "
    "it, only an approver can stop it (by rejecting it before it runs).",
    "Tell the user it was already approved; ask an approver to reject it if it must not run.",
)


def draft_unavailable() -> DomainError:
    return DRAFT_UNAVAILABLE("No draft with that id is available to you.")


def idempotency_key_reused() -> DomainError:
    return IDEMPOTENCY_KEY_REUSED("This idempotency key was already used for a different request.")


def draft_action_mismatch(draft_id: str, action: str) -> DomainError:
    return DRAFT_ACTION_MISMATCH(
        f"Draft {draft_id} proposes {action}; a draft's action can never change.",
        suggested_action=f"Revise it with propose_{action}, or propose a new draft without "
        "draft_id.",
    )


def draft_not_revisable(draft_id: str, status: str) -> DomainError:
    return DRAFT_NOT_REVISABLE(
        f"Draft {draft_id} is {status}; only a draft still waiting for approval can be revised."
    )


def draft_not_withdrawable(draft_id: str, status: str) -> DomainError:
    return DRAFT_NOT_WITHDRAWABLE(
        f"Draft {draft_id} is {status}: a human already approved it, so it can no longer be "
        "withdrawn; only an approver can stop it now, by rejecting it before it runs.",
        details={"draft_id": draft_id, "status": status},
    )


def duplicate_open_draft(twin_id: str) -> DomainError:
    return DUPLICATE_OPEN_DRAFT(
        f"Draft {twin_id} already proposes exactly these arguments and is still open.",
        suggested_action=f"Use draft {twin_id} instead of revising this one.",
        details={"draft_id": twin_id},
    )


DRAFT_EXPIRED = ErrorCode(
    "DRAFT_EXPIRED",
    Category.CONFLICT,
    "The draft passed its expires_at before it was approved and executed; nothing expired is "
    "approved or executed (deny by default).",
    "Ask for a new proposal if the change is still wanted.",
)


def draft_expired(what: str) -> DomainError:
    return DRAFT_EXPIRED(f"The draft has expired; nothing expired is {what}.")


CONTRACT_CHANGED = ErrorCode(
    "CONTRACT_CHANGED",
    Category.CONFLICT,
    "The draft was proposed under another contract_version of its action than the running "
    "code declares: what was signed (or is about to be) no longer means what it meant.",
    "Propose the change again (a revision takes the current contract) and approve that.",
)


def contract_changed(action: str, drafted: int, current: int) -> DomainError:
    return CONTRACT_CHANGED(
        f"The draft was proposed under contract_version {drafted} of {action}; the running "
        f"code declares version {current}, so it can no longer be approved or executed.",
        details={"draft_contract_version": drafted, "current_contract_version": current},
    )
