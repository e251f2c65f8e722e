"""The published OpenAPI document says what the API really does: stable operation ids,
the problem+json answers each route gives (no 422 that is never sent), typed responses."""

from __future__ import annotations

from typing import Any

import pytest

from service.api.app import create_app

EXPECTED_OPERATIONS = {
    ("get", "/healthz"): "healthz",
    ("get", "/readyz"): "readyz",
    ("get", "/v1/drafts"): "drafts_list",
    ("get", "/v1/drafts/{draft_id}"): "drafts_read",
    ("post", "/v1/drafts/{draft_id}/approvals"): "approval",
    ("post", "/v1/drafts/{draft_id}/narrow"): "narrowing",
    ("post", "/v1/drafts/{draft_id}/views"): "draft_view",
    ("post", "/v1/drafts/{draft_id}/execute"): "execution",
    ("get", "/v1/executions/{execution_id}"): "execution_read",
    ("post", "/v1/approvals/batch/statement"): "approvals_batch_statement",
    ("post", "/v1/approvals/batch"): "approvals_batch",
    ("get", "/v1/grants"): "grants_list",
    ("post", "/v1/grants"): "grants_create",
    ("post", "/v1/grants/statement"): "grants_statement",
    ("post", "/v1/grants/{grant_id}/revoke"): "grants_revoke",
    ("get", "/v1/audit/events"): "audit_query",
    ("get", "/v1/audit/export"): "audit_export",
    ("get", "/v1/audit/verify"): "audit_verify",
    ("get", "/v1/audit/checkpoints"): "audit_checkpoints",
    ("get", "/v1/traces/{trace_id}"): "trace",
    ("get", "/v1/webhooks"): "webhooks_list",
    ("post", "/v1/webhooks"): "webhooks_create",
    ("delete", "/v1/webhooks/{endpoint_id}"): "webhooks_remove",
    ("post", "/v1/webhooks/{endpoint_id}/test"): "webhooks_test",
    ("get", "/v1/webhooks/{endpoint_id}/deliveries"): "webhooks_deliveries",
    ("get", "/v1/me/credentials"): "me_credentials",
    ("post", "/v1/me/passkeys/registration-options"): "passkey_registration_options",
    ("post", "/v1/me/passkeys"): "passkey_enrolment",
    ("post", "/v1/me/key-enrolments"): "key_enrolment",
    ("get", "/v1/admin/approvers"): "admin_approvers",
    ("get", "/v1/admin/key-enrolments"): "admin_enrolments",
    ("post", "/v1/admin/key-enrolments/{enrolment_id}/approve"): "admin_enrolment_approve",
    ("post", "/v1/admin/key-enrolments/{enrolment_id}/reject"): "admin_enrolment_reject",
    ("post", "/v1/admin/keys"): "admin_key_register",
    ("post", "/v1/admin/keys/{key_id}/revoke"): "admin_key_revoke",
    ("post", "/v1/admin/passkeys/{key_id}/revoke"): "admin_passkey_revoke",
    ("get", "/v1/admin/tokens"): "admin_tokens",
    ("post", "/v1/admin/tokens"): "admin_token_issue",
    ("post", "/v1/admin/tokens/{token_id}/revoke"): "admin_token_revoke",
}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def schema(runtime) -> dict[str, Any]:
    return create_app(runtime, publisher=lambda task, args: None).openapi()


def operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method, path): operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }


def test_every_route_has_a_stable_operation_id(schema):
    assert {key: op["operationId"] for key, op in operations(schema).items()} == (
        EXPECTED_OPERATIONS
    )


def test_no_route_advertises_the_422_it_never_sends(schema):
    for key, operation in operations(schema).items():
        assert "422" not in operation["responses"], key
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def test_every_v1_route_declares_its_problem_json_answers(schema):
    for (method, path), operation in operations(schema).items():
        if not path.startswith("/v1/"):
            continue
        declared = {int(status) for status in operation["responses"] if status[0] in "45"}
        assert {401, 403} <= declared, (method, path)
        for status in declared:
            content = operation["responses"][str(status)]["content"]
            assert content == {
                "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
            }, (method, path, status)
    problem = schema["components"]["schemas"]["Problem"]
    assert {"code", "retryable", "status", "detail"} <= set(problem["required"])


def test_every_success_response_is_typed(schema):
    for (method, path), operation in operations(schema).items():
        success = next(s for s in operation["responses"] if s.startswith("2"))
        if success == "204":  # no content: nothing to type (a view report)
            assert "content" not in operation["responses"][success], (method, path)
            continue
        content = operation["responses"][success]["content"]
        if path == "/v1/audit/export":
            assert "application/x-ndjson" in content
            continue
        assert "$ref" in content["application/json"]["schema"], (method, path)
