"""Security issue §3 by fuzzing the HTTP API: whatever anyone sends, the answer is one the API
documents, never a 5xx, and every refusal is a structured problem.

Schemathesis generates requests from the app's own OpenAPI document, schema-valid ones
(positive) and schema-violating ones (negative), and they go through the whole real app
in-process (ASGI: routing, dependencies, the unit of work, the audit log, error handlers),
once per caller: every demo role, an approver of another tenant, no token and an unknown
token. Path ids are sometimes real ones (drafts in several states, an execution, traces).

Checks on every response: not a 5xx; status code, content type, headers and body as
documented; a non-2xx body is a problem with ``code`` and ``retryable``; a caller without the
role gets only 401/403; the approver of another tenant never sees a demo id in a 2xx answer,
and gets for a real demo id exactly the answer a made-up id gets (no existence oracle).

CI runs ``EXAMPLES`` cases per operation, caller and mode (at least ``MIN_CASES`` in all); a
bigger run: ``DRAFTGATE_FUZZ_SCALE=10 .venv/bin/pytest -p no:cacheprovider -q -s
tests/security/test_fuzz_api.py``. The behaviour does not depend on the database: SQLite.
"""

from __future__ import annotations

import json
import secrets
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.api.app import create_app
from service.audit import checkpoints
from service.config import DEMO_POLICIES
from service.db import session_scope
from service.keys import actions as keys
from service.keys import enrolments
from service.keys.schemas import KeyEnrolmentRequest
from service.principal import Role
from service.signing import generate_private_key, key_id_for, public_key_b64
from service.sql import utcnow
from service.tokens import actions as tokens
from service.validation import parse
from service.webhooks import actions as webhooks
from tests.security.fuzz_support import SCALE, fuzz_settings
from tests.security.helpers import agent
from tests.support.core import approve_in_core, grant_in_core, request_execution_in_core

pytestmark = [pytest.mark.full, pytest.mark.timeout(300 * SCALE)]

EXAMPLES = 10 * SCALE  # per operation, caller and generation mode
MIN_CASES = 1_000 * SCALE

IDENTITIES = (
    "agent",
    "approver_alice",
    "auditor",
    "admin",
    "foreign_approver",
    "no_token",
    "bad_token",
)
ANYONE = frozenset(IDENTITIES)
REVIEWERS = frozenset({"approver_alice", "foreign_approver", "auditor"})
APPROVERS = frozenset({"approver_alice", "foreign_approver"})
AUDITORS = frozenset({"auditor"})
ADMINS = frozenset({"admin"})
# Who may get a 2xx from each operation; everyone else gets 401 (no valid token) or 403.
SERVED = {
    "healthz": ANYONE,
    "readyz": ANYONE,
    "drafts_list": REVIEWERS,
    "drafts_read": REVIEWERS,
    "approval": APPROVERS,
    "narrowing": APPROVERS,
    "draft_view": APPROVERS,
    "execution": APPROVERS,
    "execution_read": REVIEWERS,
    "audit_query": AUDITORS,
    "audit_export": AUDITORS,
    "audit_verify": AUDITORS,
    "audit_checkpoints": AUDITORS,
    "trace": AUDITORS,
    "webhooks_create": ADMINS,
    "webhooks_list": ADMINS,
    "webhooks_remove": ADMINS,
    "webhooks_test": ADMINS,
    "webhooks_deliveries": ADMINS,
    "me_credentials": APPROVERS,
    "passkey_registration_options": APPROVERS,
    "passkey_enrolment": APPROVERS,
    "key_enrolment": APPROVERS,
    "admin_approvers": ADMINS,
    "admin_enrolments": ADMINS,
    "admin_enrolment_approve": ADMINS,
    "admin_enrolment_reject": ADMINS,
    "admin_key_register": ADMINS,
    "admin_key_revoke": ADMINS,
    "admin_passkey_revoke": ADMINS,
    "admin_tokens": ADMINS,
    "admin_token_issue": ADMINS,
    "admin_token_revoke": ADMINS,
    "approvals_batch_statement": APPROVERS,
    "approvals_batch": APPROVERS,
    "grants_list": REVIEWERS | ADMINS,
    "grants_statement": APPROVERS,
    "grants_create": APPROVERS,
    "grants_revoke": APPROVERS | ADMINS,
}
PATH_IDS = (
    "draft_id",
    "execution_id",
    "trace_id",
    "endpoint_id",
    "enrolment_id",
    "key_id",
    "token_id",
    "grant_id",
)


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # The demo's policies: refunds may be granted, so the grant routes answer.
    return {"rate_limit_per_address": "", "rate_limit_per_token": "", "policies": DEMO_POLICIES}


@dataclass
class World:
    """The app, who is calling, and the real ids worth aiming at."""

    app: Any
    tokens: dict[str, str | None]
    real_ids: dict[str, list[str]]  # path parameter name -> ids that exist in tenant "demo"

    def headers(self, identity: str) -> dict[str, str]:
        token = self.tokens[identity]
        return {} if token is None else {"Authorization": f"Bearer {token}"}

    def demo_ids(self) -> set[str]:
        return {value for ids in self.real_ids.values() for value in ids}


@pytest.fixture
def world(runtime, demo) -> Iterator[World]:
    """Drafts in several states (proposed, approved with a queued execution, one with a
    revision), a signed checkpoint (so /readyz is ready), and a token of tenant "acme"."""
    checkpoint_key = checkpoints.ensure_key(runtime.settings.resolved_checkpoint_key_file())
    door, traces = agent(runtime, demo), []

    def propose(tool: str, arguments: dict[str, Any]) -> str:
        traces.append(secrets.token_hex(16))
        return str(door.call(tool, arguments, traces[-1], None)["draft_id"])

    refund = {"order_id": "ORD-1004", "reason": "damaged"}
    approved = propose(
        "propose_refund", {**refund, "amount": {"amount_minor": 1_000, "currency": "USD"}}
    )
    pending = propose(
        "propose_refund", {**refund, "amount": {"amount_minor": 60_000, "currency": "USD"}}
    )
    propose(
        "propose_refund",
        {**refund, "draft_id": pending, "amount": {"amount_minor": 65_000, "currency": "USD"}},
    )
    cancel = propose("propose_cancel_order", {"order_id": "ORD-1002", "reason": "customer_request"})
    approve_in_core(runtime, demo, approved)
    execution, _ = request_execution_in_core(runtime, demo, approved)
    # a standing grant to aim at, covering drafts of an agent that proposes none
    grant_id = grant_in_core(
        runtime, demo, currency="USD", max_amount_minor=2_000, agent="no-such-agent"
    )
    with session_scope(runtime.engine) as session:
        foreign = tokens.issue(
            session, tenant="acme", subject="mallory", role=Role.APPROVER, actor="test"
        )
        checkpoints.create(session, checkpoint_key, now=utcnow())
        # Objects of the admin routes to aim at: none is a credential a fuzzed identity uses,
        # so revoking or deciding them (the admin may) leaves every caller as it was.
        spare = tokens.issue(session, tenant="demo", subject="spare", role=Role.AUDITOR, actor="t")
        admin = tokens.authenticate(session, demo["tokens"]["admin"])
        alice = tokens.authenticate(session, demo["tokens"]["approver_alice"])
        endpoint = webhooks.create(
            session,
            admin,
            runtime=runtime,
            body={"url": "https://93.184.215.14/hook", "events": ["draft.approved"]},
            now=utcnow(),
        )
        enrolment = enrolments.enrol_key(
            session,
            alice,
            request=parse(
                KeyEnrolmentRequest, {"public_key": public_key_b64(generate_private_key())}
            ),
            now=utcnow(),
        )
        bobs_key = public_key_b64(generate_private_key())
        keys.register(session, tenant="demo", approver="bob", public_key=bobs_key, actor="t")
        spare_id = tokens.authenticate(session, spare.token).token_id
    identities: dict[str, str | None] = {
        name: demo["tokens"][name] for name in ("agent", "approver_alice", "auditor", "admin")
    }
    identities |= {
        "foreign_approver": foreign.token,
        "no_token": None,
        "bad_token": "dg_" + secrets.token_urlsafe(32),
    }
    real_ids = {
        "draft_id": [approved, pending, cancel],
        "execution_id": [execution.id],
        "trace_id": traces,
        "endpoint_id": [endpoint.endpoint_id],
        "enrolment_id": [enrolment.enrolment_id],
        "key_id": [key_id_for(bobs_key)],
        "token_id": [spare_id],
        "grant_id": [grant_id],
    }
    yield World(create_app(runtime, publisher=lambda task, args: None), identities, real_ids)
    asgi.shutdown_lifespans()


# --- checks beyond the built-in ones --------------------------------------------------------


def _json(response: schemathesis.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def problem_has_code_and_retryable(ctx, response, case) -> None:
    """Every non-2xx answer is a problem the caller can act on."""
    if 200 <= response.status_code < 300:
        return
    body = _json(response)
    assert isinstance(body, dict), f"{response.status_code} without a JSON object body"
    assert isinstance(body.get("code"), str), f"no code: {body}"
    assert body["code"], f"an empty code: {body}"
    assert isinstance(body.get("retryable"), bool), f"no boolean retryable: {body}"


def only_the_role_gets_in(identity: str) -> Callable[..., None]:
    def only_the_role_is_served(ctx, response, case) -> None:
        operation_id = case.operation.definition.raw["operationId"]
        if identity in SERVED[operation_id]:
            return
        expected = 401 if identity in ("no_token", "bad_token") else 403
        assert response.status_code == expected, (
            f"{identity} on {operation_id}: expected {expected}, got {response.status_code}"
        )

    return only_the_role_is_served


def nothing_of_another_tenant(world: World, identity: str) -> Callable[..., None]:
    demo_ids = world.demo_ids()

    def no_demo_data_in_a_2xx(ctx, response, case) -> None:
        if identity != "foreign_approver" or not 200 <= response.status_code < 300:
            return
        text = response.content.decode(errors="replace")
        leaked = sorted(i for i in demo_ids if i in text)
        assert not leaked, f"tenant acme was shown demo ids {leaked}"
        assert '"tenant":"demo"' not in text.replace(" ", ""), "tenant acme was shown demo data"

    return no_demo_data_in_a_2xx


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    problem_has_code_and_retryable,
]


def _answer(response: schemathesis.Response) -> tuple[int, Any]:
    body = _json(response)
    return response.status_code, body.get("code") if isinstance(body, dict) else None


def same_answer_as_for_a_made_up_id(world: World, case, response) -> None:
    """For another tenant, a real demo id must be indistinguishable from one that does not
    exist: the same request with the id replaced answers the same status and code."""
    demo_ids = world.demo_ids()
    aimed = {k: v for k, v in (case.path_parameters or {}).items() if v in demo_ids}
    if not aimed:
        return
    real = dict(case.path_parameters)
    made_up = {key: _made_up(key) for key in aimed}
    case.path_parameters = {**real, **made_up}
    try:
        twin = case.call(headers=world.headers("foreign_approver"))
    finally:
        case.path_parameters = real
    assert _answer(response) == _answer(twin), (
        f"foreign approver, {case.operation.label}: real demo id {aimed} answered "
        f"{_answer(response)}, a made-up id {made_up} answered {_answer(twin)}"
    )


def _made_up(key: str) -> str:
    return {
        "draft_id": "dft_" + secrets.token_hex(16),
        "execution_id": "exe_" + secrets.token_hex(12),
        "trace_id": secrets.token_hex(16),
        "endpoint_id": "whk_" + secrets.token_hex(12),
        "enrolment_id": "enr_" + secrets.token_hex(12),
        "key_id": key_id_for(public_key_b64(generate_private_key())),
        "token_id": "tok_" + secrets.token_hex(8),
        "grant_id": "grt_" + secrets.token_hex(16),
    }[key]


# --- the fuzzing loop -----------------------------------------------------------------------


def _has_inputs(operation) -> bool:
    return any(
        len(container)
        for container in (operation.path_parameters, operation.query, operation.headers)
    ) or bool(list(operation.body))


def strategies(world: World, operation) -> dict[str, st.SearchStrategy]:
    """Per generation mode: schemathesis' cases, in positive mode also aimed at real ids."""
    positive = operation.as_strategy(GenerationMode.POSITIVE)
    aimed = [
        operation.as_strategy(GenerationMode.POSITIVE, path_parameters={name: value})
        for name in PATH_IDS
        if "{" + name + "}" in operation.path
        for value in world.real_ids[name]
    ]
    modes = {"positive": st.one_of(positive, *aimed) if aimed else positive}
    if _has_inputs(operation):
        modes["negative"] = operation.as_strategy(GenerationMode.NEGATIVE)
    return modes


@dataclass
class Run:
    cases: Counter
    failures: list[str]
    statuses: Counter


def fuzz_one(world: World, run: Run, operation, mode: str, strategy, identity: str) -> None:
    checks = [
        *CHECKS,
        only_the_role_gets_in(identity),
        nothing_of_another_tenant(world, identity),
    ]
    headers = world.headers(identity)

    @fuzz_settings(EXAMPLES)
    @given(case=strategy)
    def fuzz(case) -> None:
        run.cases[(operation.label, identity, mode)] += 1
        response = case.call(headers=headers)
        run.statuses[(operation.label, response.status_code)] += 1
        case.validate_response(response, checks=checks, headers=headers)
        if identity == "foreign_approver":
            same_answer_as_for_a_made_up_id(world, case, response)

    try:
        fuzz()
    except (Exception, BaseExceptionGroup) as failure:
        report = "".join(traceback.format_exception(failure))[-4_000:]
        run.failures.append(f"=== {operation.label} as {identity} ({mode}) ===\n{report}")


def test_fuzzed_requests_from_every_caller_get_documented_answers_and_never_a_5xx(world):
    config = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
    schema = schemathesis.openapi.from_dict(world.app.openapi(), config=config)
    schema.app = world.app
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.definition.raw["operationId"] for op in operations} == set(SERVED)
    run, started = Run(Counter(), [], Counter()), time.monotonic()
    for operation in operations:
        for mode, strategy in strategies(world, operation).items():
            for identity in IDENTITIES:
                fuzz_one(world, run, operation, mode, strategy, identity)
    total, elapsed = sum(run.cases.values()), time.monotonic() - started
    by_identity = Counter()
    for (_, identity, _), count in run.cases.items():
        by_identity[identity] += count
    print(
        f"\nAPI fuzzing: {total} generated cases over {len(operations)} operations and "
        f"{len(IDENTITIES)} callers in {elapsed:.1f}s (scale {SCALE}); by caller: "
        + ", ".join(f"{k} {v}" for k, v in sorted(by_identity.items()))
    )
    statuses: dict[str, list[str]] = {}
    for (label, status), count in sorted(run.statuses.items()):
        statuses.setdefault(label, []).append(f"{status}x{count}")
    print("\n".join(f"  {label}: {' '.join(codes)}" for label, codes in statuses.items()))
    assert not run.failures, f"{len(run.failures)} failing combinations:\n\n" + "\n\n".join(
        run.failures
    )
    assert total >= MIN_CASES, f"only {total} cases were generated (at least {MIN_CASES})"
