"""Every error of the token use cases."""

from __future__ import annotations

from service.errors import Category, DomainError, ErrorCode

TOKEN_UNAVAILABLE = ErrorCode(
    "TOKEN_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No token with that id exists in the tenant.",
    "List the tenant's tokens and use one of their ids.",
)


def token_unavailable(token_id: str, tenant: str) -> DomainError:
    return TOKEN_UNAVAILABLE(f"No token {token_id} in tenant {tenant}.")
