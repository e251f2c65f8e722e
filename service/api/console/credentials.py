"""The console's credential routes: the signed-in approver's own keys and passkeys.

What keys.js and passkeys.js call (same origin, session cookie, CSRF header on every POST):
the approver's credentials, enrolling a public key generated in the browser, and the two
steps of enrolling a passkey. Each is a thin door on service.keys' use cases; an enrolled
credential signs nothing until an admin approves its enrolment (DESIGN.md §4: token AND key).
"""

from __future__ import annotations

from fastapi import APIRouter

from service.api.console.api import JsonRoute
from service.api.console.deps import Caller, ReadUnit, Unit, Writer
from service.api.deps import JsonBody, RuntimeDep, parse_body
from service.keys import enrolments, passkeys
from service.keys.schemas import (
    ApproverCredentials,
    EnrolmentInfo,
    KeyEnrolmentRequest,
    PasskeyRegistrationRequest,
    RegistrationOptions,
)
from service.sql import utcnow
from service.validation import StrictInput

router = APIRouter(prefix="/console/credentials", include_in_schema=False, route_class=JsonRoute)


class NoOptions(StrictInput):
    """Body of POST /console/credentials/passkeys/options: an empty object (for now)."""


@router.get("", name="console.credentials")
def my_credentials(session: ReadUnit, caller: Caller) -> ApproverCredentials:
    return enrolments.my_credentials(session, caller.principal)


@router.post("/enrolments", status_code=201, name="console.key_enrolment")
def enrol_key(session: Unit, caller: Writer, body: JsonBody) -> EnrolmentInfo:
    request = parse_body(KeyEnrolmentRequest, body)
    return enrolments.enrol_key(session, caller.principal, request=request, now=utcnow())


@router.post("/passkeys/options", name="console.passkey_options")
def passkey_options(
    session: Unit, runtime: RuntimeDep, caller: Writer, body: JsonBody
) -> RegistrationOptions:
    # A POST (it stores a single-use challenge); its body carries nothing yet.
    parse_body(NoOptions, body)
    return passkeys.registration_options(
        session, caller.principal, settings=runtime.settings, now=utcnow()
    )


@router.post("/passkeys", status_code=201, name="console.passkey_enrolment")
def enrol_passkey(
    session: Unit, runtime: RuntimeDep, caller: Writer, body: JsonBody
) -> EnrolmentInfo:
    request = parse_body(PasskeyRegistrationRequest, body)
    return enrolments.enrol_passkey(
        session, caller.principal, settings=runtime.settings, request=request, now=utcnow()
    )
