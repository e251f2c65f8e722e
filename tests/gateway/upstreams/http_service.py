"""A small billing REST API for the gateway's HTTP actions: FastAPI under uvicorn.

    python -m tests.gateway.upstreams.http_service --port N --ledger PATH
        [--transient-failures N] [--token T]

(or ``create_app(options)`` served in-process by harness/servers.serve). It behaves
like a payment provider's API, so the gateway is tested against real HTTP semantics:

- ``Idempotency-Key``: the same key with the same request answers the same response and
  applies the effect once; the same key with another request is refused (409); a request
  without a key always applies. Applied effects go to the ledger (see ``ledger.py``);
- ``GET /invoices/{invoice_id}`` answers more than anyone should show an agent (the
  customer's email, internal notes) — for the response allow-list and masking;
- ``POST /invoices/{invoice_id}/refunds`` moves money (``amount`` in minor units +
  ``currency``) and refuses, with a JSON ``message``, what the business rules forbid;
- ``POST /invoices/{invoice_id}/reminders`` answers 503 the first N times per key;
- ``POST /invoices/{invoice_id}/write-offs`` is always a business refusal (422);
- its own OpenAPI document at ``/openapi.json``, every operation with an ``operationId``.

With ``--token`` every ``/invoices`` route wants ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import argparse
import hmac
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import uvicorn
from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from tests.gateway.upstreams.ledger import KeyReused, Ledger

InvoiceId = Annotated[str, PathParam(pattern=r"^INV-[0-9]{1,10}$", description="INV-1234")]
IdempotencyKey = Annotated[
    str | None, Header(alias="Idempotency-Key", max_length=255, description="Dedupes a write.")
]

SEED_INVOICES: list[dict[str, Any]] = [
    {
        "id": "INV-1001",
        "status": "paid",
        "total_cents": 12000,
        "currency": "EUR",
        "customer_name": "Ada Lovelace",
        "customer_email": "ada@example.com",
        "internal_notes": "Pays late; do not offer discounts.",
    },
    {
        "id": "INV-1002",
        "status": "paid",
        "total_cents": 5000,
        "currency": "JPY",
        "customer_name": "Grace Hopper",
        "customer_email": "grace@example.com",
        "internal_notes": "",
    },
    {
        "id": "INV-1003",
        "status": "open",
        "total_cents": 990,
        "currency": "USD",
        "customer_name": "Alan Turing",
        "customer_email": "alan@example.com",
        "internal_notes": "",
    },
]


@dataclass(frozen=True)
class Options:
    ledger: Path
    transient_failures: int = 2
    token: str | None = None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Invoice(BaseModel):
    id: str
    status: Literal["open", "paid"]
    total_cents: int
    currency: str
    refunded_cents: int
    customer_name: str
    customer_email: str
    internal_notes: str


class InvoiceList(BaseModel):
    invoices: list[Invoice]


class RefundRequest(Strict):
    amount: StrictInt = Field(ge=1, description="Amount in the currency's minor units.")
    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217; the invoice's currency.")
    reason: str = Field(min_length=1, max_length=500)


class Refund(BaseModel):
    refund_id: str
    invoice_id: str
    amount: int
    currency: str
    reason: str
    status: Literal["succeeded"]


class ReminderRequest(Strict):
    channel: Literal["email", "sms"]


class Reminder(BaseModel):
    reminder_id: str
    invoice_id: str
    channel: str


class WriteOffRequest(Strict):
    amount_cents: StrictInt = Field(ge=1)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    reason: str = Field(min_length=1, max_length=500)


class Problem(BaseModel):
    message: str


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# Every error an operation may answer, so the OpenAPI document shows the problem shape.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem} for status in (400, 401, 404, 409, 422, 503)
}


def create_app(options: Options) -> FastAPI:
    ledger = Ledger(options.ledger)
    app = FastAPI(title="Billing", version="1.0.0")
    _add_error_handlers(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, bool]:
        return {"ok": True}

    authorized = [Depends(_authorization(options))]
    app.include_router(_reads(ledger), dependencies=authorized)
    app.include_router(_refunds(ledger), dependencies=authorized)
    app.include_router(_reminders(ledger, options), dependencies=authorized)
    return app


def _reads(ledger: Ledger) -> APIRouter:
    router = APIRouter()

    @router.get("/invoices", operation_id="list_invoices")
    def list_invoices(
        status: Literal["open", "paid"] | None = None,
        limit: Annotated[int, Query(ge=1, le=50)] = 10,
    ) -> InvoiceList:
        """List invoices, optionally of one status."""
        ledger.record_call("list_invoices", None, "read")
        found = [i for i in _invoices(ledger) if status is None or i.status == status]
        return InvoiceList(invoices=found[:limit])

    @router.get("/invoices/{invoice_id}", operation_id="get_invoice", responses=ERRORS)
    def get_invoice(invoice_id: InvoiceId) -> Invoice:
        """One invoice, with its customer and internal notes."""
        ledger.record_call("get_invoice", None, "read")
        return _invoice(ledger, invoice_id)

    return router


def _refunds(ledger: Ledger) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/invoices/{invoice_id}/refunds",
        operation_id="create_refund",
        status_code=201,
        responses={201: {"model": Refund}, **ERRORS},
    )
    def create_refund(
        invoice_id: InvoiceId, refund: RefundRequest, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        """Refund part of a paid invoice, in the invoice's currency."""
        scope, arguments = "create_refund", {"invoice_id": invoice_id, **refund.model_dump()}
        _refund_rules(ledger, invoice_id, refund, idempotency_key)

        def make(effects: list[dict[str, Any]]) -> dict[str, Any]:
            number = 1 + sum(1 for e in effects if e["scope"] == scope)
            body = Refund(
                refund_id=f"RF-{number}",
                invoice_id=invoice_id,
                status="succeeded",
                **refund.model_dump(),
            )
            return {"status": 201, "body": body.model_dump()}

        return _apply(ledger, scope, idempotency_key, arguments, make)

    @router.post(
        "/invoices/{invoice_id}/write-offs",
        operation_id="write_off_invoice",
        status_code=201,
        responses=ERRORS,
    )
    def write_off_invoice(
        invoice_id: InvoiceId, write_off: WriteOffRequest, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        """Write off part of an invoice (always refused: finance must do it)."""
        _invoice(ledger, invoice_id)
        ledger.record_call("write_off_invoice", idempotency_key, "rejected")
        raise Refused(422, f"Write-offs on {invoice_id} need the finance team; nothing changed.")

    return router


def _reminders(ledger: Ledger, options: Options) -> APIRouter:
    router = APIRouter()

    @router.post(
        "/invoices/{invoice_id}/reminders",
        operation_id="send_reminder",
        status_code=201,
        responses={201: {"model": Reminder}, **ERRORS},
    )
    def send_reminder(
        invoice_id: InvoiceId, reminder: ReminderRequest, idempotency_key: IdempotencyKey = None
    ) -> JSONResponse:
        """Remind the customer to pay; the mail relay is often briefly unavailable."""
        scope = "send_reminder"
        _invoice(ledger, invoice_id)
        failed = ledger.count_calls(scope, idempotency_key, "transient")
        if failed < options.transient_failures:
            ledger.record_call(scope, idempotency_key, "transient")
            return JSONResponse(
                {"message": "The mail relay is briefly unavailable; retry."},
                status_code=503,
                headers={"Retry-After": "1"},
            )

        def make(effects: list[dict[str, Any]]) -> dict[str, Any]:
            number = 1 + sum(1 for e in effects if e["scope"] == scope)
            body = Reminder(
                reminder_id=f"RM-{number}", invoice_id=invoice_id, **reminder.model_dump()
            )
            return {"status": 201, "body": body.model_dump()}

        arguments = {"invoice_id": invoice_id, **reminder.model_dump()}
        return _apply(ledger, scope, idempotency_key, arguments, make)

    return router


def _authorization(options: Options) -> Any:
    def check(authorization: Annotated[str | None, Header()] = None) -> None:
        if options.token is None:
            return
        expected = f"Bearer {options.token}"
        if authorization is None or not hmac.compare_digest(authorization, expected):
            raise Refused(401, "Missing or wrong bearer token.")

    return check


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return JSONResponse({"message": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
        message = f"Invalid request: check {', '.join(fields)}."
        return JSONResponse({"message": message, "fields": fields}, status_code=422)


def _invoices(ledger: Ledger) -> list[Invoice]:
    refunded: dict[str, int] = {}
    for effect in ledger.effects("create_refund"):
        invoice_id = effect["arguments"]["invoice_id"]
        refunded[invoice_id] = refunded.get(invoice_id, 0) + effect["arguments"]["amount"]
    return [Invoice(**i, refunded_cents=refunded.get(i["id"], 0)) for i in SEED_INVOICES]


def _invoice(ledger: Ledger, invoice_id: str) -> Invoice:
    for invoice in _invoices(ledger):
        if invoice.id == invoice_id:
            return invoice
    raise Refused(404, f"Invoice {invoice_id} does not exist.")


def _refund_rules(ledger: Ledger, invoice_id: str, refund: RefundRequest, key: str | None) -> None:
    arguments = {"invoice_id": invoice_id, **refund.model_dump()}
    if _replayed(ledger, "create_refund", key, arguments):
        return  # a replay answers the first response, whatever the invoice is now
    invoice = _invoice(ledger, invoice_id)
    problem: tuple[int, str] | None = None
    if invoice.status != "paid":
        problem = (409, f"Invoice {invoice_id} is not paid; nothing to refund.")
    elif refund.currency != invoice.currency:
        problem = (400, f"Invoice {invoice_id} is in {invoice.currency}, not {refund.currency}.")
    elif refund.amount > invoice.total_cents - invoice.refunded_cents:
        refundable = invoice.total_cents - invoice.refunded_cents
        problem = (422, f"Refund exceeds the refundable {refundable} {invoice.currency}.")
    if problem is not None:
        ledger.record_call("create_refund", key, "rejected")
        raise Refused(*problem)


def _replayed(ledger: Ledger, scope: str, key: str | None, arguments: dict[str, Any]) -> bool:
    try:
        return ledger.replay(scope, key, arguments) is not None
    except KeyReused:
        ledger.record_call(scope, key, "conflict")
        raise Refused(409, "This Idempotency-Key was already used for another request.") from None


def _apply(
    ledger: Ledger, scope: str, key: str | None, arguments: dict[str, Any], make: Any
) -> JSONResponse:
    try:
        applied = ledger.apply(scope, key, arguments, make)
    except KeyReused:
        ledger.record_call(scope, key, "conflict")
        raise Refused(409, "This Idempotency-Key was already used for another request.") from None
    ledger.record_call(scope, key, "replayed" if applied.replayed else "applied")
    response = applied.result
    return JSONResponse(response["body"], status_code=response["status"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--transient-failures", type=int, default=Options.transient_failures)
    parser.add_argument("--token", default=None)
    args = parser.parse_args(argv)
    app = create_app(Options(args.ledger, args.transient_failures, args.token))
    # Open SSE streams would hold a graceful shutdown up; tests stop servers often.
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        ws="none",
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
