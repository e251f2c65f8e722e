"""Session use cases: sign in, find the live session behind a cookie, sign out.

The cookie carries a random secret; the row keeps only its SHA-256, so a copy of the
database signs nobody in. The CSRF token is derived from the secret (a second, separate
digest), so it is stored nowhere and cannot be computed from the row either. Every request
re-reads the credential the session rests on: a revoked token ends its sessions at their
next request, and the principal is built from the credential, exactly as a bearer request's.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.principal import Principal, Role
from service.sessions import errors, repository
from service.sessions.models import ConsoleSession, EndReason, SignInMethod
from service.tokens import repository as tokens_repository

# Who may sign in to the console. Agents never: the console is for people.
CONSOLE_ROLES = frozenset({Role.APPROVER, Role.AUDITOR, Role.ADMIN})
SECRET_PREFIX = "dgs_"  # noqa: S105 - makes a leaked session secret greppable, not a secret
_CSRF_CONTEXT = b"draftgate.console.csrf\x00"
# last_seen_at is rewritten at most this often (a write per page view would be wasteful);
# the idle timeout is therefore honoured to within this many seconds.
TOUCH_EVERY_SECONDS = 30


def secret_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token_for(secret: str) -> str:
    """The session's CSRF token: derived from the cookie's secret, never stored."""
    return hashlib.sha256(_CSRF_CONTEXT + secret.encode()).hexdigest()


def csrf_matches(secret: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token_for(secret), presented)


@dataclass(frozen=True)
class StartedSession:
    session_id: str
    secret: str  # for the cookie, once; only its digest is kept
    csrf_token: str
    expires_at: datetime


def sign_in(
    session: Session,
    principal: Principal,
    *,
    method: SignInMethod,
    now: datetime,
    lifetime_seconds: int,
    trace_id: str | None = None,
    replacing: str | None = None,
) -> StartedSession:
    """Open a console session for an authenticated person (never an agent); audited.

    The caller has already authenticated ``principal`` from its credential; the session
    remembers that credential (``principal.token_id``) and how it was presented.
    ``replacing``: the secret of the session this browser held until now, which ends."""
    principal.require(*CONSOLE_ROLES)
    previous = repository.by_secret_digest(session, secret_digest(replacing)) if replacing else None
    if previous is not None:
        end(session, previous.id, reason=EndReason.REPLACED, now=now, trace_id=trace_id)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    row = ConsoleSession(
        id="cs_" + secrets.token_hex(12),
        secret_sha256=secret_digest(secret),
        tenant=principal.tenant,
        subject=principal.subject,
        role=principal.role,
        method=method,
        credential_id=principal.token_id,
        created_at=now,
        last_seen_at=now,
        expires_at=now + timedelta(seconds=lifetime_seconds),
    )
    repository.add(session, row)
    audit.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="console.signed_in",
        trace_id=trace_id,
        data=_described(row),
    )
    return StartedSession(row.id, secret, csrf_token_for(secret), row.expires_at)


@dataclass(frozen=True)
class Verdict:
    """What a cookie's secret stands for at a moment: a live principal, or why not."""

    session_id: str | None
    principal: Principal | None
    # Set when the session has just died (idle, expired, credential revoked) and the death
    # is not recorded yet: the caller ends it (``end``), audited, in a unit of work.
    ending: EndReason | None = None
    # Why there is no principal, in words for the refusal.
    why: str = ""
    touch_due: bool = False

    def require(self) -> Principal:
        if self.principal is None:
            raise errors.session_required(self.why)
        return self.principal


def check(session: Session, secret: str | None, *, now: datetime, idle_seconds: int) -> Verdict:
    """The live session behind ``secret`` and its principal, or why there is none. Reads only
    (a lookup scope will do); the caller records a death or a touch it reports."""
    if not secret:
        return Verdict(None, None, why="not signed in")
    row = repository.by_secret_digest(session, secret_digest(secret))
    if row is None:
        return Verdict(None, None, why="the session is unknown")
    if row.ended_at is not None:
        return Verdict(row.id, None, why=f"the session ended ({_reason(row.end_reason)})")
    ending = _ending(session, row, now=now, idle_seconds=idle_seconds)
    if ending is not None:
        return Verdict(row.id, None, ending=ending, why=f"the session ended ({_reason(ending)})")
    token = tokens_repository.get(session, row.tenant, row.credential_id)
    assert token is not None  # _ending checked it
    principal = Principal(
        tenant=token.tenant, subject=token.subject, role=token.role, token_id=token.id
    )
    touch_due = now - row.last_seen_at >= timedelta(seconds=TOUCH_EVERY_SECONDS)
    return Verdict(row.id, principal, touch_due=touch_due)


def _ending(
    session: Session, row: ConsoleSession, *, now: datetime, idle_seconds: int
) -> EndReason | None:
    if now >= row.expires_at:
        return EndReason.EXPIRED
    if now - row.last_seen_at >= timedelta(seconds=idle_seconds):
        return EndReason.IDLE
    token = tokens_repository.get(session, row.tenant, row.credential_id)
    if token is None or token.revoked_at is not None or token.subject != row.subject:
        return EndReason.CREDENTIAL_REVOKED
    if token.role is not row.role or token.role not in CONSOLE_ROLES:
        return EndReason.CREDENTIAL_REVOKED
    return None


def touch(session: Session, session_id: str, *, now: datetime) -> None:
    """Record activity (bookkeeping for the idle timeout; not an audited change)."""
    row = repository.get(session, session_id, for_update=True)
    if row is not None and row.ended_at is None and row.last_seen_at < now:
        row.last_seen_at = now
        session.add(row)


def end(
    session: Session,
    session_id: str,
    *,
    reason: EndReason,
    now: datetime,
    trace_id: str | None = None,
) -> bool:
    """End a session (sign-out, idle, expired, credential revoked), audited; True if it was
    live. Ending an ended session changes nothing."""
    row = repository.get(session, session_id, for_update=True)
    if row is None or row.ended_at is not None:
        return False
    row.ended_at = now
    row.end_reason = reason
    session.add(row)
    signed_out = reason is EndReason.SIGNED_OUT
    audit.record(
        session,
        tenant=row.tenant,
        actor=f"{row.role.value}:{row.subject}" if signed_out else "system:console",
        type="console.signed_out" if signed_out else "console.session_ended",
        trace_id=trace_id,
        data={**_described(row), "reason": reason.value},
    )
    return True


def _described(row: ConsoleSession) -> dict[str, Any]:
    return {
        "session_id": row.id,
        "method": row.method.value,
        "role": row.role.value,
        "credential_id": row.credential_id,
        "expires_at": row.expires_at.isoformat(),
    }


def _reason(reason: EndReason | None) -> str:
    return {
        EndReason.SIGNED_OUT: "signed out",
        EndReason.IDLE: "idle for too long",
        EndReason.EXPIRED: "past its lifetime",
        EndReason.CREDENTIAL_REVOKED: "its credential was revoked",
        EndReason.REPLACED: "the browser signed in again",
        None: "ended",
    }[reason]
