"""Token use cases: issue, revoke, list, and turn a bearer secret into a Principal."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.audit.refusals import Refusal
from service.errors import DomainError, invalid_argument, unauthenticated
from service.principal import Principal, Role
from service.sql import utcnow
from service.tokens import errors, repository
from service.tokens.models import ApiToken
from service.tokens.schemas import IssuedToken, TokenInfo, TokenRequest
from service.validation import parse

TOKEN_PREFIX = "dg_"  # noqa: S105 - a prefix that makes leaked tokens greppable, not a secret


def digest(raw_token: str) -> str:
    return hashlib.sha256(raw_token.encode()).hexdigest()


def issue(
    session: Session,
    *,
    tenant: str,
    subject: str,
    role: Role,
    on_behalf_of: str | None = None,
    label: str = "",
    actor: str,
) -> IssuedToken:
    """Create a token; the secret is returned once and only its digest is stored."""
    request = {"tenant": tenant, "subject": subject, "role": role.value, "label": label}
    if on_behalf_of is not None:
        request["on_behalf_of"] = on_behalf_of
    parse(TokenRequest, request)
    if role is Role.AGENT and not on_behalf_of:
        raise invalid_argument("An agent token must name the end user it acts for (on_behalf_of).")
    if role is not Role.AGENT and on_behalf_of:
        raise invalid_argument("Only agent tokens act on behalf of an end user.")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        id="tok_" + secrets.token_hex(8),
        token_sha256=digest(raw),
        tenant=tenant,
        subject=subject,
        role=role,
        on_behalf_of=on_behalf_of,
        label=label,
        created_at=utcnow(),
    )
    session.add(token)
    audit.record(
        session,
        tenant=tenant,
        actor=actor,
        type="token.issued",
        data={
            "token_id": token.id,
            "subject": subject,
            "role": role.value,
            "on_behalf_of": on_behalf_of,
            "label": label,
        },
    )
    return IssuedToken(
        token_id=token.id,
        token=raw,
        tenant=tenant,
        subject=subject,
        role=role,
        on_behalf_of=on_behalf_of,
    )


def revoke(session: Session, *, tenant: str, token_id: str, actor: str) -> TokenInfo:
    """Revoke a token; every later request with it is refused."""
    token = repository.get(session, tenant, token_id)
    if token is None:
        raise errors.token_unavailable(token_id, tenant)
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        session.add(token)
        audit.record(
            session,
            tenant=tenant,
            actor=actor,
            type="token.revoked",
            data={"token_id": token.id, "subject": token.subject, "role": token.role.value},
        )
    return info(token)


def list_tokens(session: Session, *, tenant: str) -> list[TokenInfo]:
    return [info(token) for token in repository.list_for(session, tenant)]


def authenticate(
    session: Session, raw_token: str | None, *, allowed_roles: frozenset[Role] | None = None
) -> Principal:
    """The principal a bearer secret stands for; missing, unknown and revoked are all refused.

    A door that serves only some roles passes ``allowed_roles``: other tokens are
    refused there exactly like unknown ones.
    """
    if not raw_token:
        raise unauthenticated("No bearer token was presented.")
    token = repository.by_digest(session, digest(raw_token))
    if token is None:
        raise unauthenticated("The bearer token is not recognised.")
    if token.revoked_at is not None:
        raise unauthenticated("The bearer token has been revoked.")
    if allowed_roles is not None and token.role not in allowed_roles:
        accepted = ", ".join(sorted(role.value for role in allowed_roles))
        raise unauthenticated(
            f"Tokens of role {token.role.value} are not accepted here (only {accepted})."
        )
    return Principal(
        tenant=token.tenant,
        subject=token.subject,
        role=token.role,
        token_id=token.id,
        on_behalf_of=token.on_behalf_of,
    )


def refused_credential(
    error: DomainError,
    *,
    tenant: str,
    door: str,
    trace_id: str | None = None,
    presented: str | None = None,
) -> Refusal:
    """A refused credential, as ``auth.refused`` records it: the door, the reason, and a short
    prefix of the presented secret's digest (to tell repeated tries apart), never the secret."""
    context: dict[str, Any] = {"door": door, "reason": error.message}
    if presented:
        context["token_sha256_prefix"] = digest(presented)[:12]
    return Refusal("auth", error, tenant, trace_id=trace_id, context=context)


def info(token: ApiToken) -> TokenInfo:
    return TokenInfo(
        token_id=token.id,
        tenant=token.tenant,
        subject=token.subject,
        role=token.role,
        on_behalf_of=token.on_behalf_of,
        label=token.label,
        created_at=token.created_at,
        revoked_at=token.revoked_at,
    )
