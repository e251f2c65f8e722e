"""Why an OAuth access token was refused: one named check, never the token itself."""

from __future__ import annotations


class TokenRefused(Exception):
    """An access token failed ``check`` ("audience", "expired", …); ``message`` says which
    check and what was expected, in words for the audit log and the caller."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(message)
        self.check = check
        self.message = message


def refused(check: str, detail: str) -> TokenRefused:
    return TokenRefused(check, f"The OAuth access token was refused: {detail}.")
