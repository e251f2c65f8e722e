"""Every error an execution request or an execution attempt ends with."""

from __future__ import annotations

from typing import Any

from service.errors import INTERNAL_ERROR, Category, DomainError, ErrorCode
from service.registry.base import source_name

NOT_APPROVED = ErrorCode(
    "NOT_APPROVED",
    Category.CONFLICT,
    "Execution was requested for a draft that is not approved (yet).",
    "Collect the approvals its policy requires first.",
)
DRAFT_REJECTED = ErrorCode(
    "DRAFT_REJECTED",
    Category.CONFLICT,
    "Execution was requested for a rejected draft; a rejection is final.",
    "Nothing to do; a rejection is final.",
)
APPROVALS_UNVERIFIED = ErrorCode(
    "APPROVALS_UNVERIFIED",
    Category.CONFLICT,
    "The draft is marked approved but its stored approvals do not verify (a signature, key, "
    "digest or quorum check failed): the database was changed behind draftgate's back.",
    "Treat this as a security incident: inspect the audit log.",
)
EXECUTION_UNAVAILABLE = ErrorCode(
    "EXECUTION_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No execution with that id exists in the caller's tenant.",
    "Use the execution_id returned by the execute endpoint.",
)
ATTEMPTS_EXHAUSTED = ErrorCode(
    "ATTEMPTS_EXHAUSTED",
    Category.PRECONDITION_FAILED,
    "The worker stopped before recording an outcome more often than the attempt limit allows; "
    "the change was not made and will not be tried again.",
    "Investigate the worker; propose the change again if wanted.",
)
DOWNSTREAM_UNAVAILABLE = ErrorCode(
    "DOWNSTREAM_UNAVAILABLE",
    Category.TRANSIENT,
    "The downstream system's database failed or two workers raced; the attempt is retried.",
    "The worker retries automatically.",
)
SOURCE_CHANGED = ErrorCode(
    "SOURCE_CHANGED",
    Category.CONFLICT,
    "The record the change acts on (its source, e.g. the order) changed after the draft was "
    "approved: the approvals were given for a state that no longer exists, so nothing was "
    "executed. The draft is back to proposed at a new revision bound to the new state.",
    "Read what changed; approve the draft's new revision if it is still right, then execute.",
)


EXECUTION_EXPIRED = ErrorCode(
    "EXECUTION_EXPIRED",
    Category.PRECONDITION_FAILED,
    "The execution did not start within DRAFTGATE_EXECUTION_START_DEADLINE_SECONDS of its "
    "request (an outage, a lost queue); it ends expired rather than running late.",
    "Propose the change again if it is still wanted.",
)


def not_approved(status: str) -> DomainError:
    return NOT_APPROVED(f"The draft is {status}; only an approved draft can be executed.")


def draft_rejected() -> DomainError:
    return DRAFT_REJECTED("The draft was rejected; it will never be executed.")


def approvals_unverified(details: dict[str, Any]) -> DomainError:
    return APPROVALS_UNVERIFIED(
        "The draft is marked approved but its approvals do not verify; nothing was executed.",
        details={"security": True, **details},
    )


def execution_unavailable() -> DomainError:
    return EXECUTION_UNAVAILABLE("No execution with that id is available.")


def attempts_exhausted(stops: int) -> DomainError:
    return ATTEMPTS_EXHAUSTED(
        f"The worker stopped {stops} times before recording an outcome; the change was not "
        "made and will not be tried again."
    )


def downstream_unavailable(message: str) -> DomainError:
    return DOWNSTREAM_UNAVAILABLE(message)


def action_failed(exception: BaseException) -> DomainError:
    return INTERNAL_ERROR(
        f"The action failed unexpectedly ({type(exception).__name__}).",
        suggested_action="The worker retries within its attempt limit; then it fails visibly.",
    )


def source_changed(ref: str, changes: list[dict[str, str]], revision: int) -> DomainError:
    what = "; ".join(f"{c['label']}: {c['then'] or '-'} -> {c['now']}" for c in changes)
    return SOURCE_CHANGED(
        f"{source_name(ref)} changed after the approval ({what or 'its revision moved'}); "
        f"nothing was executed. The draft awaits approval again as revision {revision}."
    )


def source_changed_after_attempts(ref: str, attempt: int) -> DomainError:
    return SOURCE_CHANGED(
        f"{source_name(ref)} changed after the approval and after {attempt - 1} earlier "
        "attempt(s) of this execution, whose effect elsewhere is not known here: nothing more "
        "is executed and the draft is not rebased.",
        suggested_action="Check the order's state; propose the change again if still wanted.",
    )
