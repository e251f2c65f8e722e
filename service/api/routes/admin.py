"""Admin routes: approvers and their credentials (keys, passkeys, enrolments) and bearer
tokens, without database access. Admin role only; every call is audited (changes by the use
cases, reads as ``admin.viewed``, refusals as ``<route name>.refused``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel

from service.api.deps import JsonBody, Unit, body_object, parse_body, principal_with, request_body
from service.api.errors import problems
from service.errors import invalid_argument, permission_denied
from service.keys import admin, enrolments
from service.keys.models import EnrolmentStatus
from service.keys.schemas import (
    AdminKeyRegistration,
    ApproverList,
    EnrolmentDecision,
    EnrolmentInfo,
    EnrolmentList,
    KeyInfo,
    PasskeyInfo,
)
from service.principal import Principal, Role
from service.sql import utcnow
from service.tokens import actions as tokens
from service.tokens.schemas import IssuedToken, TokenInfo, TokenRequest
from service.validation import input_schema, parse

router = APIRouter(prefix="/v1/admin", tags=["admin"])

Admin = Annotated[Principal, Depends(principal_with(Role.ADMIN))]
EnrolmentId = Annotated[str, Path(pattern=r"^enr_[0-9a-f]{24}$")]
KeyId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")]
TokenId = Annotated[str, Path(pattern=r"^tok_[0-9a-f]{16}$")]
TOKEN_FIELDS = {"subject", "role", "on_behalf_of", "label"}
# What an admin token may mint. Approver and admin tokens are the operator's, at the host
# (draftgate tokens issue): otherwise one stolen admin token mints approvers, gives them
# keys and fills a whole quorum.
API_ISSUED_ROLES = (Role.AGENT, Role.AUDITOR)


class TokenList(BaseModel):
    tokens: list[TokenInfo]


# --- approvers and their credentials --------------------------------------------------------


@router.get(
    "/approvers",
    summary="Every approver: tokens, keys, passkeys, enrolments and status",
    name="admin.approvers",
    responses=problems(401, 403),
)
def list_approvers(session: Unit, principal: Admin) -> ApproverList:
    return ApproverList(approvers=admin.list_approvers(session, principal))


@router.get(
    "/key-enrolments",
    summary="Credentials approvers enrolled, waiting for (or decided by) an admin",
    name="admin.enrolments",
    responses=problems(400, 401, 403),
)
def list_enrolments(
    session: Unit, principal: Admin, status: EnrolmentStatus | None = EnrolmentStatus.PENDING
) -> EnrolmentList:
    found = enrolments.list_enrolments(session, principal, status=status)
    admin.record_view(session, principal, what="key_enrolments", count=len(found))
    return EnrolmentList(enrolments=found)


@router.post(
    "/key-enrolments/{enrolment_id}/approve",
    summary="Approve an enrolment: the key or passkey becomes an active credential",
    name="admin.enrolment_approve",
    responses=problems(400, 401, 403, 404, 409),
)
def approve_enrolment(enrolment_id: EnrolmentId, session: Unit, principal: Admin) -> EnrolmentInfo:
    return enrolments.approve(session, principal, enrolment_id=enrolment_id, now=utcnow())


@router.post(
    "/key-enrolments/{enrolment_id}/reject",
    summary="Reject an enrolment, with a reason: nothing becomes usable",
    openapi_extra=request_body(EnrolmentDecision),
    name="admin.enrolment_reject",
    responses=problems(400, 401, 403, 404, 409),
)
def reject_enrolment(
    enrolment_id: EnrolmentId, session: Unit, principal: Admin, body: JsonBody
) -> EnrolmentInfo:
    decision = parse_body(EnrolmentDecision, body)
    return enrolments.reject(
        session, principal, enrolment_id=enrolment_id, reason=decision.reason, now=utcnow()
    )


@router.post(
    "/keys",
    summary="Register an approver's Ed25519 public key (active at once)",
    openapi_extra=request_body(AdminKeyRegistration),
    status_code=201,
    name="admin.key_register",
    responses=problems(400, 401, 403, 409),
)
def register_key(session: Unit, principal: Admin, body: JsonBody) -> KeyInfo:
    request = parse_body(AdminKeyRegistration, body)
    return admin.register_key(
        session,
        principal,
        approver=request.approver,
        public_key=request.public_key,
        label=request.label,
    )


@router.post(
    "/keys/{key_id}/revoke",
    summary="Revoke an approver's key: nothing it signed or signs counts any more",
    name="admin.key_revoke",
    responses=problems(400, 401, 403, 404),
)
def revoke_key(key_id: KeyId, session: Unit, principal: Admin) -> KeyInfo:
    return admin.revoke_key(session, principal, key_id=key_id)


@router.post(
    "/passkeys/{key_id}/revoke",
    summary="Revoke an approver's passkey: nothing it signed or signs counts any more",
    name="admin.passkey_revoke",
    responses=problems(400, 401, 403, 404),
)
def revoke_passkey(key_id: KeyId, session: Unit, principal: Admin) -> PasskeyInfo:
    return admin.revoke_passkey(session, principal, key_id=key_id, now=utcnow())


# --- tokens ---------------------------------------------------------------------------------


@router.get(
    "/tokens",
    summary="The tenant's bearer tokens (never their secrets)",
    name="admin.tokens",
    responses=problems(401, 403),
)
def list_tokens(session: Unit, principal: Admin) -> TokenList:
    found = tokens.list_tokens(session, tenant=principal.tenant)
    admin.record_view(session, principal, what="tokens", count=len(found))
    return TokenList(tokens=found)


@router.post(
    "/tokens",
    summary="Issue an agent or auditor token in your tenant; its secret is in this answer only",
    openapi_extra=request_body(
        {
            "type": "object",
            "properties": {
                name: prop
                for name, prop in input_schema(TokenRequest)["properties"].items()
                if name in TOKEN_FIELDS
            },
            "required": ["subject", "role"],
            "additionalProperties": False,
        }
    ),
    status_code=201,
    name="admin.token_issue",
    responses=problems(400, 401, 403),
)
def issue_token(session: Unit, principal: Admin, body: JsonBody, response: Response) -> IssuedToken:
    fields = body_object(body)
    if "tenant" in fields:  # an admin issues tokens of their own tenant only
        raise invalid_argument("A token is issued in your own tenant; send no tenant.")
    request = parse(TokenRequest, {**fields, "tenant": principal.tenant})
    if request.role not in API_ISSUED_ROLES:
        raise permission_denied(
            f"The API issues agent and auditor tokens only; {request.role.value} tokens are "
            "issued by the operator at the host (draftgate tokens issue), so that an admin "
            "token cannot create the people who approve."
        )
    response.headers["Cache-Control"] = "no-store"  # the answer holds a secret
    return tokens.issue(
        session,
        tenant=principal.tenant,
        subject=request.subject,
        role=request.role,
        on_behalf_of=request.on_behalf_of,
        label=request.label,
        actor=principal.actor,
    )


@router.post(
    "/tokens/{token_id}/revoke",
    summary="Revoke a token: every later request with it is refused",
    name="admin.token_revoke",
    responses=problems(400, 401, 403, 404),
)
def revoke_token(token_id: TokenId, session: Unit, principal: Admin) -> TokenInfo:
    return tokens.revoke(session, tenant=principal.tenant, token_id=token_id, actor=principal.actor)
