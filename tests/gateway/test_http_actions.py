"""HTTP actions (issue 11, part 2) against a real REST API: the billing service under uvicorn.

The first part drives the actions themselves (what the MCP door and the worker call) against
the real service and against small hostile servers; the last part runs the whole stack:
a proposal over MCP, a signed approval, a real Celery worker executing it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.approvals import approve, bearer, get_draft
from harness.servers import serve
from service.audit import repository as audit_repository
from service.db import session_scope
from service.errors import DomainError
from service.gateway.build import build_declared
from service.gateway.config import parse_gateway_text
from service.gateway.errors import GatewayError
from service.gateway.http_actions import HttpRead, HttpWrite
from service.gateway.http_requests import MAX_RESPONSE_BYTES, prepare
from service.registry.base import Action
from tests.gateway.upstreams.processes import HttpService, serve_http_service
from tests.support.mcp_client import connect, error_of
from tests.workers.helpers import wait_for_execution

INVOICE_INPUT = {
    "type": "object",
    "properties": {"invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"}},
    "required": ["invoice_id"],
}
REFUND_INPUT = {
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "currency": {"type": "string", "enum": ["EUR", "JPY", "USD"]},
        "reason": {"type": "string", "maxLength": 200},
    },
    "required": ["invoice_id", "amount_cents", "currency", "reason"],
}


def billing_entry(base_url: str, **service: Any) -> dict[str, Any]:
    """The ``http:`` entry for the billing service: the format's own example, made real."""
    return {
        "namespace": "billing",
        "base_url": base_url,
        "timeout_seconds": 5,
        **service,
        "actions": {
            "get_invoice": {
                "kind": "read",
                "description": "Look up one invoice by id (INV-1001).",
                "input": INVOICE_INPUT,
                "request": {"method": "GET", "path": "/invoices/{invoice_id}"},
                "response_fields": ["id", "status", "total_cents", "currency", "customer_email"],
                "mask": ["customer_email"],
            },
            "create_refund": {
                "kind": "write",
                "description": "Refund part of a paid invoice, in its currency.",
                "input": REFUND_INPUT,
                "summary": "Refund {amount_cents|money:currency} on invoice {invoice_id}",
                "money": {"amount_minor": "amount_cents", "currency": "currency"},
                "request": {
                    "method": "POST",
                    "path": "/invoices/{invoice_id}/refunds",
                    "body": {
                        "amount": "{amount_cents}",
                        "currency": "{currency}",
                        "reason": "{reason}",
                    },
                },
                "response_fields": ["refund_id", "amount", "currency", "status"],
            },
            "send_reminder": {
                "kind": "write",
                "description": "Remind the customer to pay.",
                "input": {
                    "type": "object",
                    "properties": {
                        "invoice_id": {"type": "string", "pattern": "^INV-[0-9]+$"},
                        "channel": {"type": "string", "enum": ["email", "sms"]},
                    },
                    "required": ["invoice_id", "channel"],
                },
                "summary": "Send a payment reminder by {channel} for invoice {invoice_id}",
                "risk": "low",
                "request": {
                    "method": "POST",
                    "path": "/invoices/{invoice_id}/reminders",
                    "body": {"channel": "{channel}"},
                },
            },
            "write_off": {
                "kind": "write",
                "description": "Write off part of an invoice.",
                "input": REFUND_INPUT,
                "summary": "Write off {amount_cents|money:currency} of invoice {invoice_id}",
                "money": {"amount_minor": "amount_cents", "currency": "currency"},
                "request": {
                    "method": "POST",
                    "path": "/invoices/{invoice_id}/write-offs",
                    "body": {
                        "amount_cents": "{amount_cents}",
                        "currency": "{currency}",
                        "reason": "{reason}",
                    },
                },
            },
        },
    }


def gateway_text(*entries: dict[str, Any]) -> str:
    return yaml.safe_dump({"version": 1, "http": list(entries)}, sort_keys=False)


def actions_of(text: str) -> dict[str, Action]:
    """The actions the gateway builds from this file's text, as it does at start-up."""
    report = build_declared(parse_gateway_text(text, name="gateway.yaml"))
    if report.problems:
        raise GatewayError(*report.problems)
    return {action.name: action for action in report.actions}


def read(actions: dict[str, Action], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    action = actions[name]
    assert isinstance(action, HttpRead)
    params = action.Input.model_validate_json(json.dumps(arguments))
    answer: dict[str, Any] = action.handle(None, params).model_dump(mode="json")  # type: ignore[arg-type]
    return answer


def execute(
    actions: dict[str, Action], name: str, arguments: dict[str, Any], key: str
) -> dict[str, Any]:
    """What the worker does with an approved draft: re-validate, then execute with its key."""
    action = actions[name]
    assert isinstance(action, HttpWrite)
    params = action.Input.model_validate_json(json.dumps(arguments))
    action.validate(None, params)  # type: ignore[arg-type]
    outcome = action.execute(None, params, key)  # type: ignore[arg-type]
    return {"summary": outcome.summary, **outcome.data}


def refusal(call: Any) -> dict[str, Any]:
    with pytest.raises(DomainError) as caught:
        call()
    return caught.value.to_dict()


@pytest.fixture
def upstream_http_options() -> dict[str, Any]:
    return {"token": "billing-secret-token"}


@pytest.fixture
def token_headers(upstream_http: HttpService, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The service's bearer token in the environment, and the headers naming it."""
    assert upstream_http.token is not None
    monkeypatch.setenv("BILLING_TOKEN", upstream_http.token)
    return {"Authorization": {"env": "BILLING_TOKEN", "prefix": "Bearer "}}


@pytest.fixture
def billing(upstream_http: HttpService, token_headers: dict[str, Any]) -> dict[str, Action]:
    return actions_of(gateway_text(billing_entry(upstream_http.base_url, headers=token_headers)))


# --- reads -----------------------------------------------------------------------------------


def test_a_read_answers_only_the_allow_listed_fields_with_the_masked_ones_masked(
    billing: dict[str, Action], upstream_http: HttpService
) -> None:
    answer = read(billing, "billing_get_invoice", {"invoice_id": "INV-1001"})

    assert answer == {
        "id": "INV-1001",
        "status": "paid",
        "total_cents": 12000,
        "currency": "EUR",
        "customer_email": "***",
    }
    assert [call["outcome"] for call in upstream_http.ledger.calls("get_invoice")] == ["read"]


def test_a_read_the_api_refuses_is_upstream_refused_with_its_message(
    billing: dict[str, Action],
) -> None:
    error = refusal(lambda: read(billing, "billing_get_invoice", {"invoice_id": "INV-9999"}))

    assert error["code"] == "UPSTREAM_REFUSED"
    assert error["retryable"] is False
    assert "HTTP 404: Invoice INV-9999 does not exist." in error["message"]


def test_the_credential_comes_from_a_secret_file_and_a_wrong_one_is_refused(
    upstream_http: HttpService, tmp_path: Path
) -> None:
    secret = tmp_path / "billing-token"
    secret.write_text(f"{upstream_http.token}\n")
    headers = {"Authorization": {"file": str(secret), "prefix": "Bearer "}}
    actions = actions_of(gateway_text(billing_entry(upstream_http.base_url, headers=headers)))

    assert read(actions, "billing_get_invoice", {"invoice_id": "INV-1003"})["id"] == "INV-1003"
    secret.write_text("rotated-to-a-wrong-one")  # read for every request: rotation works
    error = refusal(lambda: read(actions, "billing_get_invoice", {"invoice_id": "INV-1003"}))
    assert error["code"] == "UPSTREAM_REFUSED"
    assert "HTTP 401: Missing or wrong bearer token." in error["message"]
    assert "rotated-to-a-wrong-one" not in json.dumps(error)


def test_a_missing_secret_stops_the_start_naming_the_reference_only(
    upstream_http: HttpService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BILLING_TOKEN", raising=False)
    headers = {"Authorization": {"env": "BILLING_TOKEN", "prefix": "Bearer "}}

    with pytest.raises(GatewayError, match="environment variable BILLING_TOKEN is not set"):
        actions_of(gateway_text(billing_entry(upstream_http.base_url, headers=headers)))


# --- writes ----------------------------------------------------------------------------------


REFUND = {"invoice_id": "INV-1001", "amount_cents": 2500, "currency": "EUR", "reason": "late"}


def test_a_write_sends_its_idempotency_key_and_the_api_applies_it_once(
    billing: dict[str, Action], upstream_http: HttpService
) -> None:
    first = execute(billing, "billing_create_refund", REFUND, "draft-1:2")
    again = execute(billing, "billing_create_refund", REFUND, "draft-1:2")  # a redelivery

    assert first == again
    assert first["http_status"] == 201
    assert first["response"] == {
        "refund_id": "RF-1",
        "amount": 2500,
        "currency": "EUR",
        "status": "succeeded",
    }
    effects = upstream_http.ledger.effects("create_refund")
    assert [(e["key"], e["arguments"]) for e in effects] == [
        (
            "draft-1:2",
            {"invoice_id": "INV-1001", "amount": 2500, "currency": "EUR", "reason": "late"},
        )
    ]
    outcomes = [c["outcome"] for c in upstream_http.ledger.calls("create_refund")]
    assert outcomes == ["applied", "replayed"]


def test_a_write_validates_its_preview_from_the_declaration(billing: dict[str, Action]) -> None:
    action = billing["billing_create_refund"]
    assert isinstance(action, HttpWrite)
    params = action.Input.model_validate_json(json.dumps(REFUND))

    preview = action.validate(None, params)  # type: ignore[arg-type]

    assert preview.summary == "Refund 25.00 EUR on invoice INV-1001"
    assert preview.amount is not None
    assert preview.amount.amount_minor == 2500
    assert action.amount_of(params) == preview.amount
    assert action.description.startswith("Only PROPOSES the change")


def test_a_5xx_is_transient_until_the_api_recovers(
    billing: dict[str, Action], upstream_http: HttpService
) -> None:
    reminder = {"invoice_id": "INV-1003", "channel": "email"}
    errors = [
        refusal(lambda: execute(billing, "billing_send_reminder", reminder, "d-7:1"))
        for _ in range(2)
    ]
    done = execute(billing, "billing_send_reminder", reminder, "d-7:1")

    assert [e["code"] for e in errors] == ["UPSTREAM_UNAVAILABLE"] * 2
    assert all(e["retryable"] for e in errors)
    assert "HTTP 503: The mail relay is briefly unavailable; retry." in errors[0]["message"]
    assert done["http_status"] == 201
    assert "response" not in done  # no response_fields declared: nothing of the body is kept
    assert len(upstream_http.ledger.effects("send_reminder")) == 1


def test_a_business_failure_is_final_with_the_apis_message(
    billing: dict[str, Action], upstream_http: HttpService
) -> None:
    too_much = {**REFUND, "amount_cents": 999_999}
    refused = refusal(lambda: execute(billing, "billing_create_refund", too_much, "d-8:1"))
    written_off = refusal(lambda: execute(billing, "billing_write_off", REFUND, "d-9:1"))

    assert (refused["code"], refused["retryable"]) == ("UPSTREAM_REFUSED", False)
    assert "HTTP 422: Refund exceeds the refundable 12000 EUR." in refused["message"]
    assert (written_off["code"], written_off["retryable"]) == ("UPSTREAM_REFUSED", False)
    assert "need the finance team; nothing changed." in written_off["message"]
    assert upstream_http.ledger.effects() == []


def test_declared_status_lists_override_the_defaults(
    upstream_http: HttpService, token_headers: dict[str, Any]
) -> None:
    entry = billing_entry(upstream_http.base_url, headers=token_headers)
    entry["actions"]["send_reminder"]["business_failure"] = [503]  # this API means it
    entry["actions"]["write_off"]["transient"] = [422]
    entry["actions"]["create_refund"]["success"] = [200]  # 201 is then not a success
    actions = actions_of(gateway_text(entry))
    reminder = {"invoice_id": "INV-1003", "channel": "sms"}

    final = refusal(lambda: execute(actions, "billing_send_reminder", reminder, "a:1"))
    retried = refusal(lambda: execute(actions, "billing_write_off", REFUND, "b:1"))
    unexpected = refusal(lambda: execute(actions, "billing_create_refund", REFUND, "c:1"))

    assert (final["code"], final["retryable"]) == ("UPSTREAM_REFUSED", False)
    assert "HTTP 503: The mail relay" in final["message"]
    assert (retried["code"], retried["retryable"]) == ("UPSTREAM_UNAVAILABLE", True)
    assert "HTTP 422: Write-offs on INV-1001" in retried["message"]
    assert (unexpected["code"], unexpected["retryable"]) == ("UPSTREAM_REFUSED", False)
    assert "HTTP 201" in unexpected["message"]
    assert len(upstream_http.ledger.effects("create_refund")) == 1  # made, yet not a success


# --- requests made from hostile arguments ------------------------------------------------------


def test_arguments_fill_the_request_percent_encoded_typed_and_omitted_when_absent() -> None:
    prepared = prepare(
        base_url="http://127.0.0.1:1/api/",
        method="POST",
        path="/customers/{customer}/notes",
        query={"tag": "{tags}", "source": "agent-{channel}", "limit": "{limit}"},
        body={
            "amount": "{amount}",
            "flags": "{flags}",
            "note": "Note: {text} {{literal}}",
            "nested": {"optional": "{missing}", "kept": ["{amount}", "{missing}"]},
        },
        arguments={
            "customer": "a%b?c#d e",
            "tags": ["x", "y z"],
            "channel": "chat",
            "amount": 1250,
            "flags": {"urgent": True},
            "text": "hi",
        },
    )

    assert prepared.url == "http://127.0.0.1:1/api/customers/a%25b%3Fc%23d%20e/notes"
    assert prepared.query == (("tag", "x"), ("tag", "y z"), ("source", "agent-chat"))
    assert prepared.body == {
        "amount": 1250,
        "flags": {"urgent": True},
        "note": "Note: hi {literal}",
        "nested": {"kept": [1250]},
    }


def test_the_allow_list_keeps_only_named_paths_in_the_answers_own_shape() -> None:
    entry = {
        "namespace": "shop",
        "base_url": "http://127.0.0.1:9",
        "actions": {
            "get_order": {
                "kind": "read",
                "description": "An order.",
                "request": {"method": "GET", "path": "/order"},
                "response_fields": ["id", "lines[*].sku", "lines[*].buyer.email", "notes[0]"],
                "mask": ["lines[*].buyer.email"],
            }
        },
    }
    action = actions_of(gateway_text(entry))["shop_get_order"]
    assert isinstance(action, HttpRead)
    answer = {
        "id": "O-1",
        "secret": "internal",
        "lines": [
            {"sku": "A", "price": 3, "buyer": {"email": "a@example.com", "vip": True}},
            {"sku": "B"},
        ],
        "notes": ["first", "second"],
    }

    assert action.upstream.shown(answer) == {
        "id": "O-1",
        "lines": [{"sku": "A", "buyer": {"email": "***"}}, {"sku": "B"}],
        "notes": ["first"],
    }
    assert action.Output.model_validate(action.upstream.shown({"id": "O-2"})).model_dump() == {
        "id": "O-2",
        "lines": None,
        "notes": None,
    }


@pytest.mark.parametrize("value", ["..", ".", "", "c1/api-keys", "a\\b", "/"])
def test_a_path_value_that_would_address_another_resource_is_refused_at_proposal(
    value: str,
) -> None:
    entry = billing_entry("http://127.0.0.1:9")
    entry["actions"]["send_reminder"]["input"]["properties"]["invoice_id"] = {"type": "string"}
    action = actions_of(gateway_text(entry))["billing_send_reminder"]
    assert isinstance(action, HttpWrite)
    params = action.Input.model_validate_json(json.dumps({"invoice_id": value, "channel": "sms"}))

    error = refusal(lambda: action.validate(None, params))  # type: ignore[arg-type]

    assert error["code"] == "INVALID_ARGUMENT"
    assert "cannot be used in a URL path" in error["message"]


# --- hostile and broken upstreams ----------------------------------------------------------------


def hostile_app() -> Starlette:
    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def refuse(request: Request) -> Response:
        text = "Refused \u202eevil\u202c \x1b[31mred " + "x" * 5000
        return JSONResponse({"error": {"message": text}}, status_code=409)

    async def slow(request: Request) -> Response:
        await asyncio.sleep(3)
        return JSONResponse({"id": "late"})

    async def away(request: Request) -> Response:
        return RedirectResponse("http://elsewhere.invalid/steal", status_code=307)

    async def huge(request: Request) -> Response:
        return JSONResponse({"id": "x" * (MAX_RESPONSE_BYTES + 10)})

    async def drip(request: Request) -> Response:
        async def one_byte_at_a_time() -> AsyncIterator[bytes]:
            for byte in b'{"id": "dripping........................"}':
                await asyncio.sleep(0.1)  # each read is quick; the whole answer is not
                yield bytes([byte])

        return StreamingResponse(one_byte_at_a_time(), media_type="application/json")

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/refuse", refuse, methods=["POST"]),
            Route("/slow", slow),
            Route("/away", away),
            Route("/huge", huge),
            Route("/drip", drip),
        ]
    )


@pytest.fixture(scope="module")
def hostile_url() -> Iterator[str]:
    with serve(hostile_app()) as base_url:
        yield base_url


def hostile_actions(base_url: str) -> dict[str, Action]:
    def reading(path: str) -> dict[str, Any]:
        return {
            "kind": "read",
            "description": "A read.",
            "request": {"method": "GET", "path": path},
            "response_fields": ["id"],
        }

    entry = {
        "namespace": "hostile",
        "base_url": base_url,
        "timeout_seconds": 0.5,
        "actions": {
            "refuse": {
                "kind": "write",
                "description": "A write.",
                "summary": "Do it",
                "request": {"method": "POST", "path": "/refuse"},
            },
            "slow": reading("/slow"),
            "away": reading("/away"),
            "huge": reading("/huge"),
            "drip": reading("/drip"),
        },
    }
    return actions_of(gateway_text(entry))


def test_an_upstreams_message_is_quoted_inert_and_bounded(hostile_url: str) -> None:
    actions = hostile_actions(hostile_url)

    error = refusal(lambda: execute(actions, "hostile_refuse", {}, "k:1"))

    assert error["code"] == "UPSTREAM_REFUSED"
    assert "\u202e" not in error["message"]
    assert "\x1b" not in error["message"]
    assert "Refused \\u202eevil\\u202c \\u001b[31mred xxx" in error["message"]
    assert len(error["message"]) < 700


def test_no_answer_in_time_is_transient(hostile_url: str) -> None:
    error = refusal(lambda: read(hostile_actions(hostile_url), "hostile_slow", {}))

    assert (error["code"], error["retryable"]) == ("UPSTREAM_UNAVAILABLE", True)
    assert "no answer within 0.5 s" in error["message"]


def test_an_answer_dripping_in_for_longer_than_the_timeout_is_transient(hostile_url: str) -> None:
    error = refusal(lambda: read(hostile_actions(hostile_url), "hostile_drip", {}))

    assert (error["code"], error["retryable"]) == ("UPSTREAM_UNAVAILABLE", True)


def test_a_redirect_is_not_followed(hostile_url: str) -> None:
    error = refusal(lambda: read(hostile_actions(hostile_url), "hostile_away", {}))

    assert (error["code"], error["retryable"]) == ("UPSTREAM_REFUSED", False)
    assert "HTTP 307: a redirect, which draftgate does not follow" in error["message"]


def test_an_answer_larger_than_the_bound_is_not_relayed(hostile_url: str) -> None:
    error = refusal(lambda: read(hostile_actions(hostile_url), "hostile_huge", {}))

    assert error["code"] == "UPSTREAM_REFUSED"
    assert "larger than draftgate relays" in error["message"]


# --- declarations the gateway refuses to start with ----------------------------------------------


def broken(change: Any) -> str:
    entry = billing_entry("http://127.0.0.1:9")
    change(entry)
    with pytest.raises(GatewayError) as caught:
        actions_of(gateway_text(entry))
    return str(caught.value)


def test_declaration_errors_name_the_line_and_the_problem() -> None:
    def actions(entry: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = entry["actions"]
        return result

    assert "gateway.yaml:" in broken(lambda e: actions(e)["get_invoice"].pop("response_fields"))
    assert "needs response_fields" in broken(
        lambda e: actions(e)["get_invoice"].pop("response_fields")
    )
    assert "plain http is allowed only to a loopback address" in broken(
        lambda e: e.update(base_url="http://billing.example.com")
    )
    assert "needs a summary template" in broken(lambda e: actions(e)["write_off"].pop("summary"))
    assert "in more than one of the status lists" in broken(
        lambda e: actions(e)["write_off"].update(success=[201], transient=[201])
    )
    assert "Idempotency-Key is set by draftgate itself" in broken(
        lambda e: e.update(headers={"Idempotency-Key": "fixed"})
    )
    assert "a lone brace" in broken(
        lambda e: actions(e)["get_invoice"]["request"].update(path="/invoices/{invoice_id")
    )


def test_request_placeholders_are_checked_against_the_input_schema() -> None:
    def request(entry: dict[str, Any], action: str) -> dict[str, Any]:
        found: dict[str, Any] = entry["actions"][action]["request"]
        return found

    unknown = broken(lambda e: request(e, "get_invoice").update(path="/invoices/{invoice}"))
    assert "actions.get_invoice.request.path: {invoice} names no argument" in unknown
    optional = broken(lambda e: e["actions"]["send_reminder"]["input"].update(required=["channel"]))
    assert "{invoice_id} must be a required argument" in optional
    template = broken(
        lambda e: e["actions"]["create_refund"].update(summary="Refund {amount|money:currency}")
    )
    assert "actions.create_refund.summary" in template
    assert "no field 'amount'" in template


# --- the whole stack: MCP client, signed approval, a real Celery worker ----------------------

E2E_TOKEN = "e2e-billing-token-7f3a9c"


@pytest.fixture(scope="module")
def billing_stack_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpService]:
    root = tmp_path_factory.mktemp("billing")
    with serve_http_service(root, transient_failures=2, token=E2E_TOKEN) as service:
        yield service


@pytest.fixture(scope="module")
def billing_gateway_file(
    billing_stack_upstream: HttpService, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    root = tmp_path_factory.mktemp("billing-gateway")
    secret = root / "billing-token"
    secret.write_text(E2E_TOKEN)  # a file: the worker, another process, reads it too
    headers = {"Authorization": {"file": str(secret), "prefix": "Bearer "}}
    path = root / "gateway.yaml"
    entry = billing_entry(billing_stack_upstream.base_url, headers=headers)
    path.write_text(gateway_text(entry), encoding="utf-8")
    return path


@pytest.fixture
def settings_overrides(billing_gateway_file: Path) -> dict[str, Any]:
    from service.config import DEFAULT_POLICIES

    tiers = {"EUR": [{"up_to": "100.00", "approvals": 1}, {"approvals": 2}]}
    return {
        "gateway_file": billing_gateway_file,
        "policies": {**DEFAULT_POLICIES, "billing_create_refund": {"tiers": tiers}},
    }


async def agent_call(stack: Any, tool: str, arguments: dict[str, Any]) -> Any:
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        return await agent.call_tool(tool, arguments)


async def approved_execution(stack: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Propose over MCP, sign an approval as alice, request execution; wait for the worker."""
    proposed = await agent_call(stack, tool, arguments)
    assert not proposed.is_error, proposed.content
    draft_id = proposed.structured_content["draft_id"]
    assert approve(stack.api_url, stack.demo, draft_id, "alice").status_code == 201
    response = httpx.post(
        f"{stack.api_url}/v1/drafts/{draft_id}/execute",
        headers=bearer(stack.demo["tokens"]["approver_alice"]),
        timeout=60,
    )
    assert response.status_code == 202, response.text
    execution = wait_for_execution(stack, response.json()["execution_id"])
    return {"draft_id": draft_id, **execution}


def with_key(entries: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [entry for entry in entries if entry["key"] == key]


@pytest.mark.anyio
async def test_over_mcp_a_read_is_allow_listed_and_masked_and_writes_are_only_proposals(
    stack: Any, billing_stack_upstream: HttpService
) -> None:
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        tools = {tool.name: tool for tool in (await agent.list_tools()).tools}
        answer = await agent.call_tool("billing_get_invoice", {"invoice_id": "INV-1002"})
        missing = await agent.call_tool("billing_get_invoice", {"invoice_id": "INV-4040"})

    assert tools["billing_get_invoice"].annotations.read_only_hint is True
    assert "propose_billing_create_refund" in tools
    assert "billing_create_refund" not in tools
    refund_schema = tools["propose_billing_create_refund"].input_schema
    assert refund_schema["additionalProperties"] is False
    assert "idempotency_key" in refund_schema["properties"]
    assert "get_order" in tools  # the shop is still there
    assert "propose_refund" in tools
    assert answer.structured_content == {
        "id": "INV-1002",
        "status": "paid",
        "total_cents": 5000,
        "currency": "JPY",
        "customer_email": "***",
    }
    assert error_of(missing)["code"] == "UPSTREAM_REFUSED"
    assert "Invoice INV-4040 does not exist." in error_of(missing)["message"]
    with session_scope(stack.runtime.engine) as session:
        events = audit_repository.events_for(session, "demo", type_="tool.called")
    [called] = [e for e in events if e.data["tool"] == "billing_get_invoice"]
    assert called.data["arguments"] == {"invoice_id": "INV-1002"}
    assert "grace@example.com" not in json.dumps([e.data for e in events])


@pytest.mark.anyio
async def test_an_approved_http_write_is_made_once_with_its_idempotency_key(
    stack: Any, billing_stack_upstream: HttpService
) -> None:
    ledger = billing_stack_upstream.ledger
    reason = f"duplicate charge {time.monotonic_ns()}"
    arguments = {"invoice_id": "INV-1001", "amount_cents": 2500, "currency": "EUR"}
    arguments |= {"reason": reason, "idempotency_key": None, "draft_id": None}

    execution = await approved_execution(stack, "propose_billing_create_refund", arguments)

    assert execution["status"] == "succeeded", stack.worker.output()[-3000:]
    key = f"{execution['draft_id']}:1"
    [effect] = with_key(ledger.effects("create_refund"), key)
    assert effect["arguments"] == {
        "invoice_id": "INV-1001",
        "amount": 2500,
        "currency": "EUR",
        "reason": reason,
    }
    outcome = execution["outcome"]
    assert outcome["http_status"] == 201
    assert outcome["response"]["refund_id"] == effect["result"]["body"]["refund_id"]
    draft = get_draft(stack.api_url, stack.demo["tokens"]["approver_alice"], execution["draft_id"])
    assert draft["summary"] == "Refund 25.00 EUR on invoice INV-1001"
    assert draft["amount"]["amount_minor"] == 2500
    # No secret reached the worker's log or the audit log.
    assert E2E_TOKEN not in stack.worker.output()
    with session_scope(stack.runtime.engine) as session:
        audited = json.dumps([e.data for e in audit_repository.events_for(session, "demo")])
    assert E2E_TOKEN not in audited


@pytest.mark.anyio
async def test_a_5xx_is_retried_until_it_succeeds_and_a_4xx_fails_with_the_apis_message(
    stack: Any, billing_stack_upstream: HttpService
) -> None:
    ledger = billing_stack_upstream.ledger
    reminded = await approved_execution(
        stack,
        "propose_billing_send_reminder",
        {"invoice_id": "INV-1003", "channel": "email"},
    )
    written_off = await approved_execution(
        stack,
        "propose_billing_write_off",
        {"invoice_id": "INV-1001", "amount_cents": 100, "currency": "EUR", "reason": "tiny"},
    )

    assert reminded["status"] == "succeeded", stack.worker.output()[-3000:]
    key = f"{reminded['draft_id']}:1"
    outcomes = [call["outcome"] for call in with_key(ledger.calls("send_reminder"), key)]
    assert outcomes == ["transient", "transient", "applied"]
    assert len(with_key(ledger.effects("send_reminder"), key)) == 1
    assert [attempt["result"] for attempt in reminded["attempts"]][-1] == "succeeded"
    assert len(reminded["attempts"]) == 3

    assert written_off["status"] == "failed"
    assert written_off["error"]["code"] == "UPSTREAM_REFUSED"
    assert "need the finance team; nothing changed." in written_off["error"]["message"]
    assert len(written_off["attempts"]) == 1  # a business failure is final: not retried
    async with connect(stack.mcp_url, stack.demo["tokens"]["agent"]) as agent:
        status = await agent.call_tool("get_draft", {"draft_id": written_off["draft_id"]})
    assert status.structured_content["status"] == "failed"
