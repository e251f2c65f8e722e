"""Every error a signed approval or rejection can be refused with (DESIGN.md §4)."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

KEY_NOT_OWNED = ErrorCode(
    "KEY_NOT_OWNED",
    Category.PERMISSION_DENIED,
    "The statement's key_id is not a key registered to the token's subject in this tenant.",
    "Sign with your own registered key.",
)
KEY_REVOKED = ErrorCode(
    "KEY_REVOKED",
    Category.PERMISSION_DENIED,
    "The signing key has been revoked; it signs nothing any more.",
    "Ask an admin to register a new key for you.",
)
SIGNATURE_INVALID = ErrorCode(
    "SIGNATURE_INVALID",
    Category.PERMISSION_DENIED,
    "The signature does not verify over the JCS encoding of the statement with the named key.",
    "Sign exactly the statement you send, with the key named by key_id.",
)
SELF_APPROVAL = ErrorCode(
    "SELF_APPROVAL",
    Category.PERMISSION_DENIED,
    "The approver proposed the draft, or is the end user it was proposed for (maker ≠ checker).",
    "Another approver must decide on this draft.",
)
ALREADY_SIGNED = ErrorCode(
    "ALREADY_SIGNED",
    Category.CONFLICT,
    "The approver already signed the draft's current revision.",
    "Each approver signs a revision once; wait for other approvers.",
)
APPROVER_MISMATCH = ErrorCode(
    "APPROVER_MISMATCH",
    Category.PERMISSION_DENIED,
    "The statement's approver is not the subject of the bearer token.",
    "Sign statements only in your own name, with your own token.",
)
STATEMENT_MISMATCH = ErrorCode(
    "STATEMENT_MISMATCH",
    Category.CONFLICT,
    "The statement names another draft or tenant than the request, or its action, "
    "contract_version or params_sha256 differ from the draft's current revision.",
    "Fetch the draft again and sign the statement for what it shows.",
)
STALE_REVISION = ErrorCode(
    "STALE_REVISION",
    Category.CONFLICT,
    "The statement signs an earlier revision; only the current revision can be decided on.",
    "Fetch the draft again, review the current revision and sign that.",
)
STATEMENT_STALE = ErrorCode(
    "STATEMENT_STALE",
    Category.CONFLICT,
    "The statement's issued_at is further from the server's clock than the allowed skew.",
    "Sign a fresh statement now (and check your clock).",
)
DRAFT_NOT_OPEN = ErrorCode(
    "DRAFT_NOT_OPEN",
    Category.CONFLICT,
    "The draft no longer accepts this decision (approve: only proposed drafts; reject: "
    "proposed or approved ones).",
    "Check the draft's current status.",
)


def key_not_owned() -> DomainError:
    return KEY_NOT_OWNED("The statement's key_id is not a key registered to you.")


def key_revoked() -> DomainError:
    return KEY_REVOKED("The signing key has been revoked; it signs nothing any more.")


def signature_invalid() -> DomainError:
    return SIGNATURE_INVALID(
        "The signature does not verify over the JCS encoding of the statement."
    )


def self_approval() -> DomainError:
    return SELF_APPROVAL("The proposer of a draft cannot approve or reject it.")


def already_signed(revision: int) -> DomainError:
    return ALREADY_SIGNED(f"You have already signed revision {revision} of this draft.")


def approver_mismatch() -> DomainError:
    return APPROVER_MISMATCH("The statement's approver is not the subject of your token.")


def statement_for_other_draft() -> DomainError:
    return STATEMENT_MISMATCH(
        "The statement names a different draft than the URL.",
        suggested_action="Sign a statement for this draft.",
    )


def statement_for_other_tenant() -> DomainError:
    return STATEMENT_MISMATCH(
        "The statement names a different tenant than your token.",
        suggested_action="Sign a statement for your own tenant.",
    )


def statement_mismatch(fields: list[str]) -> DomainError:
    return STATEMENT_MISMATCH(
        "The statement does not match the draft's current revision: " + ", ".join(fields) + "."
    )


def stale_revision(signed: int, current: int) -> DomainError:
    return STALE_REVISION(
        f"The statement is for revision {signed}, but the draft is at revision {current}; "
        "earlier revisions can no longer be approved."
    )


def statement_stale(issued_at: str, skew_seconds: int) -> DomainError:
    return STATEMENT_STALE(
        f"issued_at {issued_at} is more than {skew_seconds} s away from the server's clock."
    )


def draft_not_open(status: str, decision: str) -> DomainError:
    return DRAFT_NOT_OPEN(f"The draft is {status}; it no longer accepts {decision} decisions.")


APPROVAL_KEY_REVOKED = ErrorCode(
    "APPROVAL_KEY_REVOKED",
    Category.CONFLICT,
    "An approval the draft relied on was signed with a key that has since been revoked "
    "(revocation answers a stolen key, so nothing it approved runs); the quorum no longer holds.",
    "Propose the change again and have it approved with keys that are still active.",
)


def approval_key_revoked(approvers: list[str]) -> DomainError:
    return APPROVAL_KEY_REVOKED(
        "The approvals of " + ", ".join(approvers) + " were signed with keys revoked since; "
        "without them the draft's policy is not met, so nothing was executed.",
        details={"revoked_approvers": approvers},
    )


ASSERTION_INVALID = ErrorCode(
    "ASSERTION_INVALID",
    Category.PERMISSION_DENIED,
    "The passkey assertion was not made for draftgate's console: another origin or relying "
    "party, not a webauthn.get assertion, in a cross-origin frame, or malformed.",
    "Approve from the console itself, with the passkey registered there.",
)
USER_NOT_VERIFIED = ErrorCode(
    "USER_NOT_VERIFIED",
    Category.PERMISSION_DENIED,
    "The authenticator did not verify the approver (no PIN or biometric check); an approval "
    "needs user verification.",
    "Approve again and unlock the passkey with its PIN or biometric when asked.",
)
SIGN_COUNT_NOT_INCREASED = ErrorCode(
    "SIGN_COUNT_NOT_INCREASED",
    Category.PERMISSION_DENIED,
    "The passkey's signature counter did not increase: a replayed assertion, or a cloned "
    "authenticator.",
    "Approve again with your own authenticator; if this repeats, ask an admin to revoke the "
    "passkey.",
)

_ASSERTION_CODES = {
    "user_presence": USER_NOT_VERIFIED,
    "user_verification": USER_NOT_VERIFIED,
    "sign_count": SIGN_COUNT_NOT_INCREASED,
    "malformed": ASSERTION_INVALID,
    "type": ASSERTION_INVALID,
    "origin": ASSERTION_INVALID,
    "rp_id": ASSERTION_INVALID,
}


def assertion_refused(check: str, message: str) -> DomainError:
    """A refused passkey assertion: one that signs something else (another statement,
    another credential, a bad signature) is SIGNATURE_INVALID, as for an Ed25519 key."""
    code = _ASSERTION_CODES.get(check, SIGNATURE_INVALID)
    return code(message, details={"check": check})


BATCH_REFUSED = ErrorCode(
    "BATCH_REFUSED",
    Category.CONFLICT,
    "A batch approval was refused as a whole: at least one of its drafts no longer matches "
    "what was signed (revised, expired, decided, not yours to sign), or its totals do not add "
    "up; `details.items` names each item and why. Nothing of the batch was recorded.",
    "Fetch the batch statement again for the drafts still open, review it, and sign that.",
)


def batch_refused(problems: list[dict[str, str | None]], size: int) -> DomainError:
    named = "; ".join(f"{p['draft_id'] or 'the totals'}: {p['message']}" for p in problems[:10])
    return BATCH_REFUSED(
        f"Nothing was approved: {len(problems)} of the batch's {size} items do not hold ({named}).",
        details={"items": problems},
    )


NARROWING_REFUSED = ErrorCode(
    "NARROWING_REFUSED",
    Category.INVALID_ARGUMENT,
    "The params sent to narrow a draft are not a narrowing of its current revision: only a "
    "lower amount in the same currency (and dropping what the action declares droppable) "
    "may change.",
    "Lower the amount only, or reject the draft and say why.",
)


def narrowing_refused(problem: str) -> DomainError:
    return NARROWING_REFUSED(f"Not a narrowing: {problem}.")
