"""Every error the audit use cases raise."""

from __future__ import annotations

from pathlib import Path

from service.errors import Category, DomainError, ErrorCode

TRACE_UNAVAILABLE = ErrorCode(
    "TRACE_UNAVAILABLE",
    Category.UNAVAILABLE,
    "No audit event of the caller's tenant carries that trace id.",
    "Check the trace id (32 hex digits) from the draft or the audit log.",
)
CHECKPOINT_KEY_MISSING = ErrorCode(
    "CHECKPOINT_KEY_MISSING",
    Category.PRECONDITION_FAILED,
    "The audit checkpoint signing key file does not exist.",
    "Create one with `draftgate audit checkpoint-key --generate` and give auditors its public key.",
)


def trace_unavailable() -> DomainError:
    return TRACE_UNAVAILABLE("No events carry that trace id.")


def checkpoint_key_missing(path: Path) -> DomainError:
    return CHECKPOINT_KEY_MISSING(f"No checkpoint key at {path}.")
