"""Every error of the approver-key use cases."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

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


def key_unavailable(key_id: str) -> DomainError:
    return KEY_UNAVAILABLE(f"No key {key_id} in this tenant.")


def key_already_registered() -> DomainError:
    return KEY_ALREADY_REGISTERED("This public key is already registered.")
