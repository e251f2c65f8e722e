"""The signed-in approver's own credentials: enrol a passkey or a browser-made Ed25519 key
(an admin approves it before it signs anything), and see what they hold."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import (
    Approver,
    JsonBody,
    ReadUnit,
    RuntimeDep,
    Unit,
    parse_body,
    request_body,
)
from service.api.errors import problems
from service.keys import enrolments, passkeys
from service.keys.schemas import (
    ApproverCredentials,
    EnrolmentInfo,
    KeyEnrolmentRequest,
    PasskeyRegistrationRequest,
    RegistrationOptions,
)
from service.sql import utcnow

router = APIRouter(prefix="/v1/me", tags=["credentials"])


@router.get(
    "/credentials",
    summary="Your keys, passkeys and enrolments awaiting an admin",
    name="me.credentials",
    responses=problems(401, 403),
)
def my_credentials(session: ReadUnit, principal: Approver) -> ApproverCredentials:
    return enrolments.my_credentials(session, principal)


@router.post(
    "/passkeys/registration-options",
    summary="Options (and a single-use challenge) for creating a passkey",
    name="passkey.registration_options",
    responses=problems(401, 403),
)
def registration_options(
    session: Unit, runtime: RuntimeDep, principal: Approver
) -> RegistrationOptions:
    return passkeys.registration_options(
        session, principal, settings=runtime.settings, now=utcnow()
    )


@router.post(
    "/passkeys",
    summary="Register the passkey you created; an admin approves it before it signs",
    openapi_extra=request_body(PasskeyRegistrationRequest),
    status_code=201,
    name="passkey.enrolment",
    responses=problems(400, 401, 403, 409),
)
def enrol_passkey(
    session: Unit, runtime: RuntimeDep, principal: Approver, body: JsonBody
) -> EnrolmentInfo:
    request = parse_body(PasskeyRegistrationRequest, body)
    return enrolments.enrol_passkey(
        session, principal, settings=runtime.settings, request=request, now=utcnow()
    )


@router.post(
    "/key-enrolments",
    summary="Enrol an Ed25519 public key you made; an admin approves it before it signs",
    openapi_extra=request_body(KeyEnrolmentRequest),
    status_code=201,
    name="key.enrolment",
    responses=problems(400, 401, 403, 409),
)
def enrol_key(session: Unit, principal: Approver, body: JsonBody) -> EnrolmentInfo:
    request = parse_body(KeyEnrolmentRequest, body)
    return enrolments.enrol_key(session, principal, request=request, now=utcnow())
