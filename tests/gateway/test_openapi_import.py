"""``draftgate gateway import-openapi`` (issue 11, part 3): an API's OpenAPI document → the
gateway file for chosen operations, which loads and works against that API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from service.gateway.errors import GatewayError
from service.gateway.http_actions import HttpRead, HttpWrite
from service.gateway.openapi import declaration_text
from tests.gateway.test_http_actions import actions_of
from tests.gateway.upstreams.processes import (
    OCTOKIT_OPENAPI,
    UPSTREAMS_DIR,
    HttpService,
    install_npm_upstreams,
)
from tests.support.cli import run

OPERATIONS = ["get_invoice", "list_invoices", "create_refund", "send_reminder"]


def imported(upstream: HttpService, tmp_path: Path, *args: str) -> Path:
    output = tmp_path / "gateway.yaml"
    options = [arg for operation in OPERATIONS for arg in ("--operation", operation)]
    result = run(
        "gateway", "import-openapi", upstream.openapi_url, *options, "--output", str(output), *args
    )
    assert result.exit_code == 0, result.stderr
    assert "draftgate gateway check" in result.stdout
    return output


def test_the_import_of_the_services_own_document_passes_gateway_check(
    upstream_http: HttpService, tmp_path: Path
) -> None:
    output = imported(upstream_http, tmp_path)

    checked = run("gateway", "check", "--file", str(output), "--json")

    assert checked.exit_code == 0, checked.stderr
    tools = {tool["tool"]: tool["kind"] for tool in json.loads(checked.stdout)["tools"]}
    assert tools == {
        "billing_get_invoice": "read",
        "billing_list_invoices": "read",
        "propose_billing_create_refund": "write",
        "propose_billing_send_reminder": "write",
    }


def test_the_imported_declaration_reads_and_writes_the_real_service(
    upstream_http: HttpService, tmp_path: Path
) -> None:
    actions = actions_of(imported(upstream_http, tmp_path).read_text())
    get_invoice, refund = actions["billing_get_invoice"], actions["billing_create_refund"]
    assert isinstance(get_invoice, HttpRead)
    assert isinstance(refund, HttpWrite)

    invoice = get_invoice.handle(None, get_invoice.Input(invoice_id="INV-1001"))  # type: ignore[arg-type, call-arg]
    params = refund.Input.model_validate_json(
        json.dumps({"invoice_id": "INV-1001", "amount": 1500, "currency": "EUR", "reason": "dup"})
    )
    preview = refund.validate(None, params)  # type: ignore[arg-type]
    outcome = refund.execute(None, params, "draft-x:1")  # type: ignore[arg-type]

    shown = invoice.model_dump(mode="json")
    assert shown["customer_email"] == "***"
    assert shown["customer_name"] == "***"
    assert shown["total_cents"] == 12000
    # money was obvious (an integer documented in minor units beside a currency)
    assert preview.amount is not None
    assert preview.amount.render() == "15.00 EUR"
    assert preview.summary == "Create Refund: 15.00 EUR, invoice_id INV-1001, reason dup"
    assert outcome.data["http_status"] == 201
    assert [e["key"] for e in upstream_http.ledger.effects("create_refund")] == ["draft-x:1"]


def test_kinds_namespace_and_base_url_can_be_chosen(
    upstream_http: HttpService, tmp_path: Path
) -> None:
    output = imported(
        upstream_http,
        tmp_path,
        "--kind",
        "list_invoices=write",
        "--namespace",
        "money",
        "--base-url",
        "https://billing.example.com/v2",
    )

    service = yaml.safe_load(output.read_text())["http"][0]
    assert service["namespace"] == "money"
    assert service["base_url"] == "https://billing.example.com/v2"
    assert service["actions"]["list_invoices"]["kind"] == "write"
    assert service["actions"]["get_invoice"]["kind"] == "read"


def test_refusals_say_what_to_do(upstream_http: HttpService, tmp_path: Path) -> None:
    unknown = run("gateway", "import-openapi", upstream_http.openapi_url, "--operation", "nope")
    existing = tmp_path / "taken.yaml"
    existing.write_text("mine")
    taken = run(
        "gateway", "import-openapi", upstream_http.openapi_url, "--operation", "get_invoice",
        "--output", str(existing),
    )  # fmt: skip
    bad_kind = run(
        "gateway", "import-openapi", upstream_http.openapi_url, "--operation", "get_invoice",
        "--kind", "get_invoice=delete",
    )  # fmt: skip

    assert unknown.exit_code == 1
    assert "no operation 'nope' (operations: create_refund, get_invoice" in unknown.stderr
    assert taken.exit_code == 1
    assert "pass --force" in taken.stderr
    assert existing.read_text() == "mine"
    assert bad_kind.exit_code == 1
    assert "OPERATION_ID=read" in bad_kind.stderr


# --- documents nobody served: OpenAPI 3.0 idioms, references, what cannot be made strict ----


def document(**components: Any) -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "Shipping API", "version": "2"},
        "servers": [{"url": "https://ship.example.com/api"}],
        "paths": {
            "/parcels/{parcel_id}": {
                "parameters": [{"$ref": "#/components/parameters/ParcelId"}],
                "get": {
                    "operationId": "getParcel",
                    "summary": "Get a parcel {with braces}",
                    "responses": {
                        "200": {
                            "description": "ok",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Parcel"}
                                }
                            },
                        }
                    },
                },
                "patch": {
                    "operationId": "updateParcel",
                    "summary": "Change a parcel {x}",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ParcelChange"}
                            }
                        },
                    },
                    "responses": {"204": {"description": "done"}},
                },
            }
        },
        "components": {
            "parameters": {
                "ParcelId": {
                    "name": "parcel_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "maxLength": 20},
                }
            },
            "schemas": {
                "Parcel": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "readOnly": True},
                        "recipient": {"$ref": "#/components/schemas/Recipient"},
                        "weight_grams": {"type": "integer"},
                    },
                },
                "Recipient": {
                    "type": "object",
                    "properties": {
                        "full_name": {"type": "string"},
                        "phone": {"type": "string", "example": "+49 30 1234"},
                    },
                },
                "ParcelChange": {
                    "type": "object",
                    "required": ["weight_grams"],
                    "properties": {
                        "id": {"type": "string", "readOnly": True},
                        "weight_grams": {
                            "type": "integer",
                            "minimum": 1,
                            "exclusiveMinimum": True,
                        },
                        "note": {"type": "string", "nullable": True, "example": "fragile"},
                        "parcel_id": {"type": "string"},
                    },
                },
                **components,
            },
        },
    }


def test_references_and_openapi_3_0_idioms_become_the_schema_the_gateway_accepts() -> None:
    text = declaration_text(document(), ["getParcel", "updateParcel"])

    service = yaml.safe_load(text)["http"][0]
    get, update = service["actions"]["get_parcel"], service["actions"]["update_parcel"]
    assert (service["namespace"], service["base_url"]) == (
        "shipping",
        "https://ship.example.com/api",
    )
    assert get["request"] == {"method": "GET", "path": "/parcels/{parcel_id}"}
    assert get["response_fields"] == [
        "id",
        "recipient.full_name",
        "recipient.phone",
        "weight_grams",
    ]
    assert get["mask"] == ["recipient.full_name", "recipient.phone"]
    assert update["input"]["properties"] == {
        "parcel_id": {"type": "string", "maxLength": 20},
        "weight_grams": {"type": "integer", "exclusiveMinimum": 1},
        "note": {"type": ["string", "null"]},
        "body_parcel_id": {"type": "string"},  # a body member named like a path parameter
    }
    assert update["input"]["required"] == ["parcel_id", "weight_grams"]
    assert update["request"]["body"] == {
        "weight_grams": "{weight_grams}",
        "note": "{note}",
        "parcel_id": "{body_parcel_id}",
    }
    # The operation's own braces are literal in the placeholder summary.
    assert (
        update["summary"]
        == "Change a parcel {{x}}: parcel_id {parcel_id}, weight_grams {weight_grams}"
    )
    assert "money" not in update
    assert "# money: where the amount is" in text  # not obvious: a commented hint instead


def test_what_cannot_be_made_strict_fails_the_import_naming_it() -> None:
    loose = document()
    loose["components"]["schemas"]["ParcelChange"]["properties"]["labels"] = {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }
    recursive = document()
    recursive["components"]["schemas"]["Recipient"]["properties"]["forward_to"] = {
        "$ref": "#/components/schemas/Recipient"
    }

    with pytest.raises(GatewayError, match=r"update_parcel.*labels.*additionalProperties"):
        declaration_text(loose, ["updateParcel"])
    with pytest.raises(GatewayError, match="Recipient' is recursive"):
        declaration_text(recursive, ["getParcel"])
    with pytest.raises(GatewayError, match="no operation 'deleteParcel'"):
        declaration_text(document(), ["deleteParcel"])


def test_a_document_from_a_file_without_servers_says_the_base_url_is_a_placeholder(
    upstream_http: HttpService, tmp_path: Path
) -> None:
    spec = tmp_path / "openapi.yaml"
    spec.write_text(yaml.safe_dump(httpx.get(upstream_http.openapi_url, timeout=30).json()))

    result = run("gateway", "import-openapi", str(spec), "--operation", "get_invoice")

    assert result.exit_code == 0, result.stderr
    assert "base_url: http://127.0.0.1:8000\n" in result.stdout
    assert "# the document names no server: replace base_url" in result.stdout


@pytest.mark.full  # GitHub's whole description: 13 MB, a second or two
def test_githubs_published_description_imports_issue_operations_that_gateway_check_accepts(
    tmp_path,
):
    """Issue 24.6: ``api.github.com.json`` of npm's ``@octokit/openapi`` (pinned by the
    upstreams' lock file), three issue operations. Its issue answer documents 391 fields and
    its ``title`` is ``oneOf: [string, integer]``: the importer keeps the 50 shallowest fields
    and the first type, says so in the file, and the file loads."""
    install_npm_upstreams()
    document = (
        UPSTREAMS_DIR / "node_modules" / OCTOKIT_OPENAPI / "generated" / "api.github.com.json"
    )
    output = tmp_path / "github.yaml"
    operations = ["issues/create", "issues/get", "issues/create-comment"]

    result = run(
        "gateway", "import-openapi", str(document),
        *[arg for op in operations for arg in ("--operation", op)],
        "--namespace", "github", "--output", str(output),
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    text = output.read_text(encoding="utf-8")
    assert "the 50 shallowest of the 391 fields the API documents" in text
    assert "was narrowed to its first (string)" in text
    checked = run("gateway", "check", "--file", str(output))
    assert checked.exit_code == 0, checked.stderr
    assert "propose_github_issues_create " in checked.stdout
    assert "github_issues_get " in checked.stdout
    declared = yaml.safe_load(text)["http"][0]["actions"]
    assert len(declared["issues_get"]["response_fields"]) == 50
