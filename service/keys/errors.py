"""Every error of the approver-key use cases."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode
from service.signing import WEAK_KEY_REASON

KEY_UNAVAILABLE = ErrorCode(
    "KEY_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No approver key with that id exists in the tenant.",
    "List the tenant's keys and use one of their ids.",
)
KEY_ALREADY_REGISTERED = ErrorCode(
    "KEY_ALREADY_REGISTERED",
    Category.CONFLICT,
    "The public key is already registered (to anyone, in any tenant).",
    "Generate a new key pair for each approver and purpose.",
)

WEAK_PUBLIC_KEY = ErrorCode(
    "WEAK_PUBLIC_KEY",
    Category.INVALID_ARGUMENT,
    "The public key is not a strong Ed25519 key: a small-order point (such as the "
    "identity), a point with a small-order component, or a non-canonical encoding. Under such "
    "a key signatures can be forged without any private key, so it is never registered, "
    "enrolled or counted.",
    "Generate a new key pair with a standard Ed25519 generator (draftgate keys generate, the "
    "console, a passkey) and register or enrol its public key; an admin revokes the weak one.",
)


def key_unavailable(key_id: str) -> DomainError:
    return KEY_UNAVAILABLE(f"No key {key_id} in this tenant.")


def key_already_registered() -> DomainError:
    return KEY_ALREADY_REGISTERED("This public key is already registered.")


def weak_public_key(what: str = "This public key", reason: str = WEAK_KEY_REASON) -> DomainError:
    """``what`` (a key or passkey, in words) is refused, and why, for the person who sent it."""
    return WEAK_PUBLIC_KEY(f"{what} is refused: {reason}.")


PASSKEY_UNAVAILABLE = ErrorCode(
    "PASSKEY_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No passkey with that key id exists in the tenant.",
    "List the tenant's approvers and use one of their passkeys' key ids.",
)
ENROLMENT_UNAVAILABLE = ErrorCode(
    "ENROLMENT_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No key enrolment with that id exists in the tenant.",
    "List the tenant's key enrolments and use one of their ids.",
)
ENROLMENT_DECIDED = ErrorCode(
    "ENROLMENT_DECIDED",
    Category.CONFLICT,
    "The key enrolment was already approved or rejected.",
    "Nothing to do; the approver enrols again if a new credential is needed.",
)
ENROLMENT_PENDING = ErrorCode(
    "ENROLMENT_PENDING",
    Category.CONFLICT,
    "That credential is already waiting for an admin's decision.",
    "Wait for an admin to approve or reject the pending enrolment.",
)
SELF_ENROLMENT = ErrorCode(
    "SELF_ENROLMENT",
    Category.PERMISSION_DENIED,
    "An admin cannot decide on an enrolment of a credential in their own name.",
    "Another admin must approve or reject it.",
)
REGISTRATION_CHALLENGE_UNKNOWN = ErrorCode(
    "REGISTRATION_CHALLENGE_UNKNOWN",
    Category.CONFLICT,
    "The passkey registration names a challenge that was not issued to you, was already "
    "used, or has expired.",
    "Ask for new registration options and create the passkey with them.",
)
PASSKEY_REGISTRATION_INVALID = ErrorCode(
    "PASSKEY_REGISTRATION_INVALID",
    Category.INVALID_ARGUMENT,
    "The passkey registration does not verify: wrong origin or relying party, no user "
    "verification, an unsupported algorithm, or a malformed response.",
    "Create the passkey again in the console, with user verification (PIN or biometric).",
)


def passkey_unavailable(key_id: str) -> DomainError:
    return PASSKEY_UNAVAILABLE(f"No passkey {key_id} in this tenant.")


def enrolment_unavailable(enrolment_id: str) -> DomainError:
    return ENROLMENT_UNAVAILABLE(f"No key enrolment {enrolment_id} in this tenant.")


def enrolment_decided(status: str) -> DomainError:
    return ENROLMENT_DECIDED(f"The enrolment is already {status}.")


def enrolment_pending() -> DomainError:
    return ENROLMENT_PENDING("This credential is already waiting for an admin's decision.")


def self_enrolment() -> DomainError:
    return SELF_ENROLMENT("You cannot decide on the enrolment of your own credential.")


def registration_challenge_unknown() -> DomainError:
    return REGISTRATION_CHALLENGE_UNKNOWN(
        "The registration's challenge was not issued to you, was already used, or has expired."
    )


def passkey_registration_invalid(problem: str) -> DomainError:
    return PASSKEY_REGISTRATION_INVALID(f"The passkey registration does not verify: {problem}")
