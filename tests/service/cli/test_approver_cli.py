"""``draftgate drafts|approve|reject|execute|executions`` as an approver runs them, in-process,
talking to a real API server over HTTP (one per module and backend, reset for each test; on
SQLite, and on PostgreSQL too where what ends up in the database is the point).

One test drives a stand-in API that lies about what is to be signed: a lying draftgate server
is a system that does not exist here, so a fake is the only way to show the CLI refuses it.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from sqlalchemy import select
from sqlmodel import Session, col
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import Result

from harness.approvals import get_draft
from harness.orders import Orders
from harness.servers import serve
from mcp_adapter.tools import ToolDoor
from service.approvals.models import Approval
from service.canonical import canonical_json
from service.cli import passphrase
from service.db import session_scope
from service.executions.models import Execution
from service.principal import Role
from service.signing import generate_private_key, key_id_for, write_private_key
from service.text import is_unsafe
from service.tokens import actions as tokens
from service.tracing import new_trace_id
from tests.service.executions.test_runner import propose_refund
from tests.support import cli
from tests.support.backends import both_backends

TENANT = "demo"
PASSPHRASE = "carol's passphrase"


def run_cli(
    *args: str, api_url: str, token: str | None, stdin: str | None = None, **extra_env: str
) -> Result:
    """Run the CLI as an approver does: only the API URL and a bearer token, no database."""
    env = {"DRAFTGATE_API_URL": api_url, **extra_env}
    if token is not None:
        env["DRAFTGATE_TOKEN"] = token
    return cli.run(*args, env=env, input=stdin)


@pytest.fixture
def runtime(served: cli.Served):
    return served.runtime


@pytest.fixture
def demo(served: cli.Served) -> dict[str, Any]:
    return served.demo


@pytest.fixture
def api(served: cli.Served) -> str:
    return served.url


@pytest.fixture
def door(runtime, demo) -> ToolDoor:
    return ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])


def refund(door: ToolDoor, amount_minor: int = 2_500, **extra: Any) -> str:
    result = door.call(
        "propose_refund",
        {
            "order_id": "ORD-1004",
            "amount": {"amount_minor": amount_minor, "currency": "USD"},
            "reason": "damaged",
            **extra,
        },
        new_trace_id(),
        None,
    )
    return str(result["draft_id"])


def as_(demo: dict[str, Any], who: str) -> str:
    return str(
        demo["tokens"][f"approver_{who}"] if who in ("alice", "bob") else demo["tokens"][who]
    )


def key_of(demo: dict[str, Any], who: str) -> str:
    return str(demo["approvers"][who]["private_key_file"])


def reject_as(api: str, demo: dict[str, Any], draft_id: str, who: str, reason: str) -> Result:
    """``draftgate reject … --reason … --yes`` as ``who``; the CLI's result."""
    return run_cli(
        "reject",
        draft_id,
        "--key",
        key_of(demo, who),
        "--reason",
        reason,
        "--yes",
        api_url=api,
        token=as_(demo, who),
    )


def approve_as(api: str, demo: dict[str, Any], draft_id: str, who: str) -> None:
    result = run_cli(
        "approve", draft_id, "--key", key_of(demo, who), "--yes", api_url=api, token=as_(demo, who)
    )
    assert result.exit_code == 0, result.stderr


def approvals_in_db(runtime, draft_id: str) -> list[Approval]:
    with Session(runtime.engine) as session:
        statement = select(Approval).where(col(Approval.draft_id) == draft_id)
        return list(session.scalars(statement).all())


def executions_in_db(runtime, draft_id: str) -> list[Execution]:
    with Session(runtime.engine) as session:
        statement = select(Execution).where(col(Execution.draft_id) == draft_id)
        return list(session.scalars(statement).all())


# --- drafts list / show ----------------------------------------------------------------------


@both_backends
def test_drafts_list_shows_the_queue(api, demo, door):
    small = refund(door, 2_500)
    large = refund(door, 60_000)

    result = run_cli("drafts", "list", api_url=api, token=as_(demo, "alice"))

    assert result.exit_code == 0, result.stderr
    [header, *lines] = result.stdout.splitlines()
    assert header.split() == ["DRAFT", "STATUS", "ACTION", "AMOUNT", "APPROVALS", "RISK", "SUMMARY"]
    assert [line.split()[0] for line in lines] == [large, small]  # newest first
    [small_line] = [line for line in lines if line.startswith(small)]
    assert small_line.split()[1:3] == ["proposed", "refund"]
    assert "0/1" in small_line.split()
    [large_line] = [line for line in lines if line.startswith(large)]
    assert "0/2" in large_line.split()


@both_backends
def test_drafts_list_as_json_with_filters_and_pages(api, demo, door):
    drafts = [refund(door, 1_000 + n) for n in range(3)]
    token = as_(demo, "bob")

    first = run_cli("drafts", "list", "--limit", "2", api_url=api, token=token)
    assert first.exit_code == 0, first.stderr
    more = re.search(r"^more: --cursor (\S+)$", first.stdout, flags=re.MULTILINE)
    assert more, first.stdout
    rest = run_cli(
        "drafts",
        "list",
        "--json",
        "--limit",
        "2",
        "--cursor",
        more.group(1),
        api_url=api,
        token=token,
    )
    assert rest.exit_code == 0, rest.stderr
    page = json.loads(rest.stdout)
    assert [d["draft_id"] for d in page["drafts"]] == [drafts[0]]
    assert page["next_cursor"] is None

    none = run_cli("drafts", "list", "--json", "--status", "approved", api_url=api, token=token)
    assert json.loads(none.stdout)["drafts"] == []
    refunds = run_cli("drafts", "list", "--json", "--action", "refund", api_url=api, token=token)
    assert {d["draft_id"] for d in json.loads(refunds.stdout)["drafts"]} == set(drafts)


def test_drafts_show_prints_exact_params_and_digest(api, demo, door):
    draft_id = refund(door, 2_500, note="Box arrived crushed")

    result = run_cli("drafts", "show", draft_id, api_url=api, token=as_(demo, "alice"))

    assert result.exit_code == 0, result.stderr
    shown = get_draft(api, as_(demo, "alice"), draft_id)
    canonical = rfc8785.dumps(shown["params"]).decode()
    assert f"draft {draft_id}" in result.stdout
    assert "refund revision 1 [proposed]" in result.stdout
    assert shown["summary"] in result.stdout
    assert f"params: {canonical}" in result.stdout
    assert f"params_sha256: {hashlib.sha256(canonical.encode()).hexdigest()}" in result.stdout
    assert "proposed by support-agent for cust-ada" in result.stdout

    as_json = run_cli("drafts", "show", draft_id, "--json", api_url=api, token=as_(demo, "alice"))
    assert as_json.exit_code == 0, as_json.stderr
    parsed = json.loads(as_json.stdout)
    assert parsed["params"] == shown["params"]
    assert parsed["statement_to_sign"]["draft_id"] == draft_id


def test_drafts_show_prints_the_order_the_approval_binds_and_warns(api, demo, door):
    first, second = refund(door, 50_000), refund(door, 40_000)  # 900.00 of 785.00 USD

    result = run_cli("drafts", "show", second, api_url=api, token=as_(demo, "alice"))

    assert result.exit_code == 0, result.stderr
    revision = get_draft(api, as_(demo, "alice"), second)["source_revision"]
    assert f"  source: order:ORD-1004 at revision {revision}\n" in result.stdout
    assert "    Refundable now: 785.00 USD\n" in result.stdout
    assert f"    also pending on it: {first} [proposed] 500.00 USD\n" in result.stdout
    assert "    together: 900.00 USD; allowed now: 785.00 USD\n" in result.stdout
    assert "  WARNING: Together with 1 other pending draft(s) this comes to 900.00 USD" in (
        result.stdout
    )


def test_drafts_show_an_unknown_draft_fails(api, demo):
    result = run_cli("drafts", "show", "dft_" + "0" * 32, api_url=api, token=as_(demo, "alice"))
    assert result.exit_code == 1
    assert "DRAFT_UNAVAILABLE" in result.stderr


def test_commands_without_a_token_fail_before_calling_anyone(api, demo):
    result = run_cli("drafts", "list", api_url=api, token=None)
    assert result.exit_code == 2
    assert "DRAFTGATE_TOKEN" in result.stderr


def test_an_unreachable_api_fails_cleanly():
    # A port bound but not listening refuses connections, and stays ours for the whole test
    # (a port merely found free could be taken by a server of a parallel test).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        result = run_cli("drafts", "list", api_url=f"http://127.0.0.1:{port}", token="dg_x")
    assert result.exit_code == 1
    assert "API_UNREACHABLE" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_agent_token_is_refused(api, demo):
    result = run_cli("drafts", "list", api_url=api, token=demo["tokens"]["agent"])
    assert result.exit_code == 1
    assert "PERMISSION_DENIED" in result.stderr


# --- approve / reject -------------------------------------------------------------------------


@both_backends
def test_approve_signs_and_the_draft_becomes_approved(api, runtime, demo, door):
    draft_id = refund(door)

    result = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "alice"),
        "--yes",
        api_url=api,
        token=as_(demo, "alice"),
    )

    assert result.exit_code == 0, result.stderr
    assert "approved revision 1: draft is approved (1 of 1 approvals)" in result.stdout
    assert get_draft(api, as_(demo, "alice"), draft_id)["status"] == "approved"
    [approval] = approvals_in_db(runtime, draft_id)
    assert (approval.approver, approval.decision) == ("alice", "approve")
    assert approval.key_id == demo["approvers"]["alice"]["key_id"]
    assert executions_in_db(runtime, draft_id) == []  # --execute was not given


def test_approve_asks_first_and_a_no_signs_nothing(api, runtime, demo, door, at_a_terminal):
    draft_id = refund(door)

    result = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "alice"),
        api_url=api,
        token=as_(demo, "alice"),
        stdin="n\n",
    )

    assert result.exit_code == 1
    assert "Sign this approve of revision 1? [y/N]" in result.stdout
    assert "not signed: you answered no" in result.stderr
    assert approvals_in_db(runtime, draft_id) == []
    assert get_draft(api, as_(demo, "alice"), draft_id)["status"] == "proposed"

    yes = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "alice"),
        api_url=api,
        token=as_(demo, "alice"),
        stdin="y\n",
    )
    assert yes.exit_code == 0, yes.stderr
    assert get_draft(api, as_(demo, "alice"), draft_id)["status"] == "approved"


@both_backends
def test_approve_of_a_two_approver_draft_waits_for_the_second(api, runtime, demo, door):
    draft_id = refund(door, 60_000)

    first = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "alice"),
        "--yes",
        "--execute",
        api_url=api,
        token=as_(demo, "alice"),
    )

    assert first.exit_code == 0, first.stderr
    assert "draft is proposed (1 of 2 approvals)" in first.stdout
    assert "not executing yet" in first.stdout
    assert executions_in_db(runtime, draft_id) == []

    second = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "bob"),
        "--yes",
        api_url=api,
        token=as_(demo, "bob"),
    )
    assert second.exit_code == 0, second.stderr
    assert "draft is approved (2 of 2 approvals)" in second.stdout


def test_approve_with_someone_elses_key_is_refused_by_the_server(api, runtime, demo, door):
    draft_id = refund(door)

    result = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "bob"),
        "--yes",
        api_url=api,
        token=as_(demo, "alice"),
    )

    assert result.exit_code == 1
    assert "KEY_NOT_OWNED" in result.stderr
    assert approvals_in_db(runtime, draft_id) == []


def test_approve_with_an_unreadable_key_file_fails(api, demo, door, tmp_path):
    draft_id = refund(door)
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("hello")
    for key in (tmp_path / "missing.pem", not_a_key):
        result = run_cli(
            "approve", draft_id, "--key", str(key), "--yes", api_url=api, token=as_(demo, "alice")
        )
        assert result.exit_code == 1
        assert "cannot use" in result.stderr
    assert get_draft(api, as_(demo, "alice"), draft_id)["status"] == "proposed"


def test_approve_an_already_approved_draft_fails_without_signing(api, runtime, demo, door):
    draft_id = refund(door)
    approve_as(api, demo, draft_id, "alice")

    result = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "bob"),
        "--yes",
        api_url=api,
        token=as_(demo, "bob"),
    )

    assert result.exit_code == 1
    assert "does not accept decisions" in result.stderr
    assert [a.approver for a in approvals_in_db(runtime, draft_id)] == ["alice"]


@both_backends
def test_reject_with_a_reason_ends_the_draft(api, runtime, demo, door):
    draft_id = refund(door)
    reason = "Customer already got a replacement."

    result = reject_as(api, demo, draft_id, "bob", reason)

    assert result.exit_code == 0, result.stderr
    assert "rejected: draft is rejected" in result.stdout
    draft = get_draft(api, as_(demo, "alice"), draft_id)
    assert (draft["status"], draft["status_reason"]) == ("rejected", reason)
    [approval] = approvals_in_db(runtime, draft_id)
    assert (approval.approver, approval.decision, approval.reason) == ("bob", "reject", reason)


def test_reject_needs_a_reason(api, runtime, demo, door):
    draft_id = refund(door)
    result = run_cli(
        "reject",
        draft_id,
        "--key",
        key_of(demo, "bob"),
        "--yes",
        api_url=api,
        token=as_(demo, "bob"),
    )
    assert result.exit_code == 2
    assert "--reason" in result.stderr
    assert approvals_in_db(runtime, draft_id) == []


@both_backends
def test_a_key_generated_encrypted_with_the_cli_signs_with_its_passphrase_until_revoked(
    api, runtime, demo, door, tmp_path
):
    pem = tmp_path / "carol.pem"
    db_env = cli.operator_env(runtime, DRAFTGATE_DEFAULT_TENANT=TENANT)
    unlocked = {"DRAFTGATE_KEY_PASSPHRASE": PASSPHRASE}
    generated = run_cli("keys", "generate", "--out", str(pem), api_url=api, token=None, **unlocked)
    assert generated.exit_code == 0, generated.stderr
    assert pem.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    public = re.search(r"^public key:\s+(\S+)$", generated.stdout, flags=re.MULTILINE)
    assert public
    registered = run_cli(
        "keys",
        "register",
        "--approver",
        "carol",
        "--public-key",
        public.group(1),
        api_url=api,
        token=None,
        **db_env,
    )
    assert registered.exit_code == 0, registered.stderr
    with session_scope(runtime.engine) as session:
        carol = tokens.issue(
            session, tenant=TENANT, subject="carol", role=Role.APPROVER, actor="operator:test"
        ).token
    first = refund(door, 1_000)
    wrong = run_cli(
        "approve",
        first,
        "--key",
        str(pem),
        "--yes",
        api_url=api,
        token=carol,
        DRAFTGATE_KEY_PASSPHRASE="not " + PASSPHRASE,
    )
    assert wrong.exit_code == 1
    assert "passphrase" in wrong.stderr
    assert approvals_in_db(runtime, first) == []

    approved = run_cli(
        "approve", first, "--key", str(pem), "--yes", api_url=api, token=carol, **unlocked
    )

    assert approved.exit_code == 0, approved.stderr
    [approval] = approvals_in_db(runtime, first)
    assert approval.key_id == key_id_for(public.group(1))

    revoked = run_cli(
        "keys", "revoke", key_id_for(public.group(1)), api_url=api, token=None, **db_env
    )
    assert revoked.exit_code == 0, revoked.stderr
    second = refund(door, 1_100)
    refused = run_cli(
        "approve", second, "--key", str(pem), "--yes", api_url=api, token=carol, **unlocked
    )
    assert refused.exit_code == 1
    assert "KEY_REVOKED" in refused.stderr
    assert approvals_in_db(runtime, second) == []


# --- execute / executions show -----------------------------------------------------------------


@both_backends
def test_execute_an_approved_draft_and_show_the_execution(api, runtime, demo, door):
    draft_id = refund(door)
    approve_as(api, demo, draft_id, "alice")

    result = run_cli("execute", draft_id, api_url=api, token=as_(demo, "bob"))

    assert result.exit_code == 0, result.stderr
    match = re.fullmatch(r"execution (exe_[0-9a-f]+): queued\n", result.stdout)
    assert match, result.stdout
    execution_id = match.group(1)
    assert [e.id for e in executions_in_db(runtime, draft_id)] == [execution_id]

    again = run_cli("execute", draft_id, api_url=api, token=as_(demo, "alice"))
    assert again.exit_code == 0, again.stderr
    assert execution_id in again.stdout  # the same execution, not a second one
    assert len(executions_in_db(runtime, draft_id)) == 1

    shown = run_cli("executions", "show", execution_id, api_url=api, token=as_(demo, "alice"))
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.startswith(
        f"execution {execution_id} of draft {draft_id} (revision 1, refund): "
    )
    as_json = run_cli(
        "executions", "show", execution_id, "--json", api_url=api, token=demo["tokens"]["auditor"]
    )
    assert as_json.exit_code == 0, as_json.stderr
    execution = json.loads(as_json.stdout)
    assert (execution["execution_id"], execution["draft_id"]) == (execution_id, draft_id)
    assert execution["requested_by"] == "approver:bob"


def test_execute_before_approval_fails(api, runtime, demo, door):
    draft_id = refund(door)
    result = run_cli("execute", draft_id, api_url=api, token=as_(demo, "alice"))
    assert result.exit_code == 1
    assert "NOT_APPROVED" in result.stderr
    assert executions_in_db(runtime, draft_id) == []


def test_executions_show_an_unknown_execution_fails(api, demo):
    result = run_cli(
        "executions", "show", "exe_000000000000000000000000", api_url=api, token=as_(demo, "alice")
    )
    assert result.exit_code == 1
    assert "EXECUTION_UNAVAILABLE" in result.stderr


def test_approve_with_execute_runs_the_refund_to_success(stack):
    demo = stack.demo
    draft_id = refund(ToolDoor(stack.runtime, stdio_token=demo["tokens"]["agent"]), 1_500)

    result = run_cli(
        "approve",
        draft_id,
        "--key",
        key_of(demo, "alice"),
        "--execute",
        "--yes",
        api_url=stack.api_url,
        token=as_(demo, "alice"),
    )

    assert result.exit_code == 0, result.stderr
    assert "draft is approved (1 of 1 approvals)" in result.stdout
    match = re.search(r"^execution (exe_[0-9a-f]+): queued$", result.stdout, flags=re.MULTILINE)
    assert match, result.stdout
    deadline = time.monotonic() + 90
    while True:  # waiting for the worker, not asserting how long it takes
        draft = get_draft(stack.api_url, as_(demo, "alice"), draft_id)
        if draft["status"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert draft["status"] == "succeeded", stack.worker.output()[-3000:] if stack.worker else ""
    assert draft["execution"]["execution_id"] == match.group(1)
    shown = run_cli(
        "executions", "show", match.group(1), api_url=stack.api_url, token=as_(demo, "alice")
    )
    assert shown.exit_code == 0, shown.stderr
    assert ": succeeded" in shown.stdout.splitlines()[0]
    assert "outcome:" in shown.stdout


# --- the CLI never signs what the server misrepresents ----------------------------------------


DRAFT_ID = "dft_0123456789abcdef0123456789abcdef"
PARAMS = {
    "order_id": "ORD-1004",
    "amount": {"amount_minor": 2_500, "currency": "USD"},
    "reason": "damaged",
}
DIGEST = hashlib.sha256(rfc8785.dumps(PARAMS)).hexdigest()
OTHER_DIGEST = hashlib.sha256(
    rfc8785.dumps({**PARAMS, "amount": {"amount_minor": 250_000, "currency": "USD"}})
).hexdigest()


def shown_draft(**changes: Any) -> dict[str, Any]:
    """A draft as GET /v1/drafts/{id} returns it; ``statement__x`` changes the statement."""
    statement = {
        "type": "draftgate.approval.v1",
        "tenant": TENANT,
        "draft_id": DRAFT_ID,
        "revision": 2,
        "action": "refund",
        "contract_version": 1,
        "params_sha256": DIGEST,
        "decision": "approve",
        "approver": "alice",
        "key_id": None,
        "issued_at": "2026-11-29T10:00:00Z",
    }
    draft: dict[str, Any] = {
        "draft_id": DRAFT_ID,
        "tenant": TENANT,
        "action": "refund",
        "contract_version": 1,
        "revision": 2,
        "status": "proposed",
        "status_reason": None,
        "params": PARAMS,
        "params_sha256": DIGEST,
        "summary": "Refund 25.00 USD on order ORD-1004 (damaged)",
        "amount": {"amount_minor": 2_500, "currency": "USD", "display": "25.00 USD"},
        "risk": "low",
        "policy": {
            "name": "refund",
            "approvals_required": 1,
            "ttl_seconds": 86400,
            "rule": "refunds up to 500.00 need 1 approval",
        },
        "approvals_required": 1,
        "proposed_by": {"agent": "support-agent", "on_behalf_of": "cust-ada"},
        "trace_id": None,
        "created_at": "2026-11-29T09:59:00Z",
        "updated_at": "2026-11-29T09:59:00Z",
        "expires_at": "2026-11-30T09:59:00Z",
        "approvals": [],
        "revisions": [],
        "execution": None,
        "statement_to_sign": statement,
    }
    for name, value in changes.items():
        if name.startswith("statement__"):
            statement[name.removeprefix("statement__")] = value
        else:
            draft[name] = value
    return draft


def listed(draft: dict[str, Any]) -> dict[str, Any]:
    """The draft as GET /v1/drafts lists it."""
    names = ("draft_id", "status", "action", "amount", "risk", "summary")
    return {
        **{name: draft[name] for name in names},
        "approvals": {"received": 0, "required": draft["approvals_required"]},
    }


class StandIn:
    """A fake draftgate API serving one draft (alone in its list); records every request it
    receives. One server serves the module; ``show`` gives it this test's draft and a new
    record."""

    def __init__(self) -> None:
        self.draft: dict[str, Any] = {}
        self.received: list[tuple[str, str]] = []
        # What GET /v1/executions/<id> answers, one after another (the last one repeats).
        self.executions: list[dict[str, Any]] = []

    def show(
        self, draft: dict[str, Any], executions: list[dict[str, Any]] | None = None
    ) -> list[tuple[str, str]]:
        self.draft, self.received, self.executions = draft, [], list(executions or [])
        return self.received

    def app(self) -> Starlette:
        async def healthz(request: Request) -> JSONResponse:
            return JSONResponse({"status": "ok"})

        async def anything(request: Request) -> JSONResponse:
            self.received.append((request.method, request.url.path))
            if request.method == "GET" and request.url.path == f"/v1/drafts/{DRAFT_ID}":
                return JSONResponse(self.draft)
            if request.method == "GET" and request.url.path == "/v1/drafts":
                return JSONResponse({"drafts": [listed(self.draft)], "next_cursor": None})
            if request.method == "POST" and request.url.path.endswith("/execute"):
                return JSONResponse(
                    {"execution_id": EXECUTION_ID, "status": "queued"}, status_code=202
                )
            if request.method == "GET" and request.url.path == f"/v1/executions/{EXECUTION_ID}":
                answer = self.executions[0] if len(self.executions) == 1 else self.executions.pop(0)
                return JSONResponse(answer)
            if request.method == "POST" and request.url.path.endswith("/approvals"):
                return JSONResponse(
                    {**self.draft, "status": "approved", "statement_to_sign": None},
                    status_code=201,
                )
            return JSONResponse({"code": "NOT_FOUND", "detail": "no"}, status_code=404)

        methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
        return Starlette(
            routes=[Route("/healthz", healthz), Route("/{path:path}", anything, methods=methods)]
        )


@pytest.fixture(scope="module")
def stand_in_server() -> Iterator[tuple[StandIn, str]]:
    stand_in = StandIn()
    with serve(stand_in.app()) as url:
        yield stand_in, url


@pytest.fixture
def stand_in_api(stand_in_server: tuple[StandIn, str]) -> Any:
    """``stand_in_api(draft)`` -> (url, received): the stand-in API now serving ``draft``."""
    stand_in, url = stand_in_server
    return lambda draft, executions=None: (url, stand_in.show(draft, executions))


@pytest.fixture
def alice_pem(tmp_path) -> Path:
    path = tmp_path / "alice.pem"
    write_private_key(generate_private_key(), path)
    return path


def test_the_stand_in_api_sees_the_post_of_an_honest_draft(alice_pem, stand_in_api):
    """The control: against an honest draft the CLI does post, so the fake can tell."""
    url, received = stand_in_api(shown_draft())
    result = run_cli(
        "approve", DRAFT_ID, "--key", str(alice_pem), "--yes", api_url=url, token="dg_fake"
    )
    assert result.exit_code == 0, result.stderr
    assert ("POST", f"/v1/drafts/{DRAFT_ID}/approvals") in received


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        pytest.param(
            {"statement__params_sha256": OTHER_DIGEST},
            "params_sha256",
            id="statement-digest-differs",
        ),
        pytest.param({"statement__revision": 1}, "revision", id="statement-for-revision-1"),
        pytest.param({"revision": 3}, "revision", id="draft-revision-differs"),
        pytest.param(
            {"params_sha256": OTHER_DIGEST, "statement__params_sha256": OTHER_DIGEST},
            "params_sha256 (of the params shown)",
            id="shown-digest-not-of-shown-params",
        ),
        pytest.param({"statement__draft_id": "dft_" + "f" * 32}, "draft_id", id="another-draft"),
        pytest.param({"statement__tenant": "acme"}, "tenant", id="another-tenant"),
        pytest.param({"statement__action": "cancel_order"}, "action", id="another-action"),
        pytest.param({"statement__contract_version": 2}, "contract_version", id="another-contract"),
    ],
)
@pytest.mark.parametrize("command", ["approve", "reject"])
def test_the_cli_refuses_to_sign_a_statement_that_does_not_match_the_params_shown(
    alice_pem, stand_in_api, changes, named, command
):
    extra = ["--reason", "no"] if command == "reject" else []
    url, received = stand_in_api(shown_draft(**changes))
    result = run_cli(
        command, DRAFT_ID, "--key", str(alice_pem), *extra, "--yes", api_url=url, token="dg_fake"
    )

    assert result.exit_code == 1, result.stdout
    assert "refusing to sign" in result.stderr
    assert "does not match" in result.stderr
    assert named in result.stderr.split("does not match", 1)[1]
    assert [method for method, _ in received if method != "GET"] == [], received
    assert received == [("GET", f"/v1/drafts/{DRAFT_ID}")]


@pytest.mark.parametrize("command", ["approve", "reject"])
def test_the_cli_refuses_to_sign_another_draft_than_the_one_asked_for(
    alice_pem, stand_in_api, command
):
    """Asked to approve DRAFT_ID, the server shows a consistent draft with another id: signing
    it would hand a valid approval of a draft nobody asked about to whoever runs that server."""
    other = "dft_" + "f" * 32
    extra = ["--reason", "no"] if command == "reject" else []
    url, received = stand_in_api(shown_draft(draft_id=other, statement__draft_id=other))
    result = run_cli(
        command, DRAFT_ID, "--key", str(alice_pem), *extra, "--yes", api_url=url, token="dg_fake"
    )

    assert result.exit_code == 1, result.stdout
    assert "draft_id" in result.stderr
    assert [method for method, _ in received if method != "GET"] == [], received


# --- encrypted approver keys ------------------------------------------------------------------


@pytest.fixture
def at_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a person sat at a terminal: CliRunner's stdin is a pipe, which the command rightly
    never asks; its input then stands for what that person types (hidden)."""
    monkeypatch.setattr(passphrase, "at_a_terminal", lambda: True)


@pytest.fixture
def alice_encrypted_pem(tmp_path) -> Path:
    path = tmp_path / "alice-encrypted.pem"
    write_private_key(generate_private_key(), path, passphrase=PASSPHRASE.encode())
    return path


def decide(command: str, key: Path, url: str, *, stdin: str | None = None, **env: str) -> Result:
    extra = ["--reason", "no"] if command == "reject" else []
    return run_cli(
        command,
        DRAFT_ID,
        "--key",
        str(key),
        *extra,
        "--yes",
        api_url=url,
        token="dg_fake",
        stdin=stdin,
        **env,
    )


@pytest.mark.parametrize("command", ["approve", "reject"])
def test_an_encrypted_key_signs_with_the_passphrase_from_the_environment(
    alice_encrypted_pem, stand_in_api, command
):
    url, received = stand_in_api(shown_draft())

    result = decide(command, alice_encrypted_pem, url, DRAFTGATE_KEY_PASSPHRASE=PASSPHRASE)

    assert result.exit_code == 0, result.stderr
    assert ("POST", f"/v1/drafts/{DRAFT_ID}/approvals") in received
    assert "Passphrase for" not in result.stdout + result.stderr  # nobody was asked
    assert PASSPHRASE not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["approve", "reject"])
def test_a_wrong_passphrase_is_refused_before_anything_is_fetched_or_sent(
    alice_encrypted_pem, stand_in_api, command
):
    url, received = stand_in_api(shown_draft())
    wrong = "not " + PASSPHRASE

    result = decide(command, alice_encrypted_pem, url, DRAFTGATE_KEY_PASSPHRASE=wrong)

    assert result.exit_code == 1
    assert f"cannot use {alice_encrypted_pem}" in result.stderr
    assert "passphrase does not decrypt" in result.stderr
    assert wrong not in result.stdout + result.stderr
    assert received == []


def test_an_encrypted_key_with_no_passphrase_and_no_terminal_fails_clearly(
    alice_encrypted_pem, stand_in_api
):
    url, received = stand_in_api(shown_draft())

    result = decide("approve", alice_encrypted_pem, url, stdin=PASSPHRASE + "\n")

    assert result.exit_code == 1
    assert "is encrypted" in result.stderr
    assert "DRAFTGATE_KEY_PASSPHRASE" in result.stderr
    assert received == []


def test_at_a_terminal_the_passphrase_is_asked_for_without_echoing_it(
    alice_encrypted_pem, stand_in_api, at_a_terminal
):
    url, received = stand_in_api(shown_draft())

    result = decide("approve", alice_encrypted_pem, url, stdin=PASSPHRASE + "\n")

    assert result.exit_code == 0, result.stderr
    assert f"Passphrase for {alice_encrypted_pem}" in result.stderr
    assert PASSPHRASE not in result.stdout + result.stderr
    assert ("POST", f"/v1/drafts/{DRAFT_ID}/approvals") in received


def test_at_a_terminal_a_wrong_passphrase_sends_nothing(
    alice_encrypted_pem, stand_in_api, at_a_terminal
):
    url, received = stand_in_api(shown_draft())

    result = decide("approve", alice_encrypted_pem, url, stdin="guess\n")

    assert result.exit_code == 1
    assert "passphrase does not decrypt" in result.stderr
    assert "guess" not in result.stdout + result.stderr
    assert received == []


def test_a_plain_key_is_used_without_asking_for_a_passphrase(
    alice_pem, stand_in_api, at_a_terminal
):
    """A terminal and no input: were a passphrase asked for, the command would end on EOF."""
    url, received = stand_in_api(shown_draft())

    result = decide("approve", alice_pem, url)

    assert result.exit_code == 0, result.stderr
    assert "Passphrase" not in result.stdout + result.stderr
    assert ("POST", f"/v1/drafts/{DRAFT_ID}/approvals") in received


# --- confirming without a terminal ----------------------------------------------------------


@pytest.mark.parametrize("command", ["approve", "reject"])
@pytest.mark.parametrize("stdin", [None, "y\n"], ids=["no-input", "piped-yes"])
def test_without_a_terminal_and_without_yes_nothing_is_signed_and_it_says_how_to_confirm(
    alice_pem, stand_in_api, command, stdin
):
    """Not a bare "Aborted.": the command names --yes, exits 2 (a usage error), and signs
    nothing, not even for a "y" piped in (whatever feeds stdin is not the approver)."""
    url, received = stand_in_api(shown_draft())
    extra = ["--reason", "no"] if command == "reject" else []

    result = run_cli(
        command,
        DRAFT_ID,
        "--key",
        str(alice_pem),
        *extra,
        api_url=url,
        token="dg_fake",
        stdin=stdin,
    )

    assert result.exit_code == 2, result.stdout + result.stderr
    assert "Aborted" not in result.stdout + result.stderr
    assert "stdin is not a terminal" in result.stderr
    assert "pass --yes to sign without being asked" in result.stderr
    # shown, never signed (the view report says it was on the terminal: not a decision)
    assert [method for method, path in received if not path.endswith("/views")] == ["GET"]


# --- what an agent wrote cannot draw on the approver's terminal (defence in depth) ------------

# Text the API refuses on the way in (tests/security/test_hostile_text.py); a server that lies,
# a row written straight into the database or data older than that check can still hold it.
CONCEAL, RTL_OVERRIDE, ZERO_WIDTH = "\x1b[8m", "\u202e", "\u200b"
HOSTILE_PARAMS = {**PARAMS, "note": f"fine{CONCEAL} hidden{RTL_OVERRIDE}00.01{ZERO_WIDTH}"}
HOSTILE_DIGEST = hashlib.sha256(rfc8785.dumps(HOSTILE_PARAMS)).hexdigest()


def hostile_draft() -> dict[str, Any]:
    return shown_draft(
        summary=f"Refund 25.00 USD{CONCEAL} really 2500.00{RTL_OVERRIDE}DSU{ZERO_WIDTH}",
        params=HOSTILE_PARAMS,
        params_sha256=HOSTILE_DIGEST,
        statement__params_sha256=HOSTILE_DIGEST,
        risk=f"low{ZERO_WIDTH}",
        proposed_by={"agent": f"support-agent{ZERO_WIDTH}", "on_behalf_of": "cust-ada\r"},
        policy={"rule": f"no approval needed{CONCEAL}", "approvals_required": 1},
        approvals=[
            {
                "decision": "approve",
                "approver": f"bob{RTL_OVERRIDE}",
                "revision": 1,
                "counts": False,
                "problem": f"stale{CONCEAL}",
            }
        ],
    )


def assert_inert(output: str) -> None:
    """Every unsafe character shown as a visible escape: none reaches the terminal raw."""
    assert [c for c in output if is_unsafe(c) and c != "\n"] == []
    assert "\\u001b[8m" in output
    assert "\\u202e" in output
    assert "\\u200b" in output


def test_drafts_show_prints_hostile_text_as_visible_escapes(stand_in_api):
    url, _ = stand_in_api(hostile_draft())

    result = run_cli("drafts", "show", DRAFT_ID, api_url=url, token="dg_fake")

    assert result.exit_code == 0, result.stderr
    assert_inert(result.stdout)
    lines = result.stdout.splitlines()
    assert "  Refund 25.00 USD\\u001b[8m really 2500.00\\u202eDSU\\u200b" in lines
    assert "proposed by support-agent\\u200b for cust-ada\\u000d;" in result.stdout
    assert "  policy: no approval needed\\u001b[8m" in lines
    assert "bob\\u202e rev 1 — does not count (stale\\u001b[8m)" in result.stdout
    # in the params, JSON already escapes controls; what it leaves raw is now escaped too
    assert '"note":"fine\\u001b[8m hidden\\u202e00.01\\u200b"' in result.stdout


def test_drafts_list_prints_hostile_text_as_visible_escapes(stand_in_api):
    url, _ = stand_in_api(hostile_draft())

    result = run_cli("drafts", "list", api_url=url, token="dg_fake")

    assert result.exit_code == 0, result.stderr
    assert_inert(result.stdout)
    [header, line] = result.stdout.splitlines()
    assert line.endswith("Refund 25.00 USD\\u001b[8m really 2500.00\\u202eDSU\\u200b")
    # columns are measured on what is printed: the escaped risk widens its column
    assert "low\\u200b" in line.split()
    assert line.index("Refund") == header.index("SUMMARY")


def test_approve_shows_hostile_text_as_visible_escapes_before_asking(
    alice_pem, stand_in_api, at_a_terminal
):
    url, received = stand_in_api(hostile_draft())

    result = run_cli(
        "approve", DRAFT_ID, "--key", str(alice_pem), api_url=url, token="dg_fake", stdin="n\n"
    )

    assert result.exit_code == 1  # answered no
    assert "Sign this approve of revision 2?" in result.stdout
    assert_inert(result.stdout)
    assert [method for method, path in received if not path.endswith("/views")] == ["GET"]


def test_trace_prints_hostile_text_as_visible_escapes(monkeypatch):
    """An agent's tool calls are summarised in the trace; the auditor's terminal shows them
    inert (the API refuses such text on the way in, but not every row came through it)."""
    from service.cli.client import ApiClient

    trace_id = "a" * 32
    view = {
        "trace_id": trace_id,
        "drafts": [{"draft_id": DRAFT_ID, "action": f"refund{RTL_OVERRIDE}", "status": "proposed"}],
        "steps": [
            {
                "at": "2026-12-01T12:00:00.000000Z",
                "seq": 7,
                "actor": f"agent:bot{ZERO_WIDTH}",
                "summary": f"ok{CONCEAL} really 2500.00{RTL_OVERRIDE}DSU{ZERO_WIDTH}",
            }
        ],
        "diagnosis": f"waiting{CONCEAL} for approval",
    }
    monkeypatch.setattr(ApiClient, "get", lambda self, path, **params: view)

    result = run_cli("trace", trace_id, api_url="http://127.0.0.1:9", token="dg_fake")

    assert result.exit_code == 0, result.stderr
    assert_inert(result.stdout)
    assert "really 2500.00\\u202eDSU\\u200b" in result.stdout


EXECUTION_ID = "exe_" + "e" * 24


def execution_view(status: str, **extra: Any) -> dict[str, Any]:
    return {"execution_id": EXECUTION_ID, "status": status, **extra}


def test_approve_execute_wait_follows_the_execution_to_its_outcome(alice_pem, stand_in_api):
    url, received = stand_in_api(
        shown_draft(),
        [
            execution_view("queued"),
            execution_view("running"),
            execution_view("succeeded", outcome={"summary": "refunded 25.00 USD"}),
        ],
    )

    result = run_cli(
        "approve", DRAFT_ID, "--key", str(alice_pem), "--yes", "--execute", "--wait",
        api_url=url, token="dg_fake",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-4:] == [
        f"execution {EXECUTION_ID}: queued",
        f"execution {EXECUTION_ID}: running",
        f"execution {EXECUTION_ID}: succeeded",
        "outcome: refunded 25.00 USD",
    ]
    assert ("GET", f"/v1/executions/{EXECUTION_ID}") in received


def test_execute_wait_exits_1_when_the_execution_fails(stand_in_api):
    url, _ = stand_in_api(
        shown_draft(), [execution_view("failed", error={"message": "the card was declined"})]
    )

    result = run_cli("execute", DRAFT_ID, "--wait", api_url=url, token="dg_fake")

    assert result.exit_code == 1
    assert f"execution {EXECUTION_ID} failed: the card was declined" in result.stderr


def test_execute_wait_gives_up_after_its_timeout(stand_in_api):
    url, _ = stand_in_api(shown_draft(), [execution_view("queued")])

    result = run_cli("execute", DRAFT_ID, "--wait", "--timeout", "1", api_url=url, token="dg_fake")

    assert result.exit_code == 1
    assert f"execution {EXECUTION_ID} is still queued after 1 s" in result.stderr


def test_execute_without_wait_only_requests(stand_in_api):
    url, received = stand_in_api(shown_draft(), [execution_view("queued")])

    result = run_cli("execute", DRAFT_ID, api_url=url, token="dg_fake")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"execution {EXECUTION_ID}: queued"
    assert ("GET", f"/v1/executions/{EXECUTION_ID}") not in received


def test_multi_line_text_sits_under_a_gutter_and_imitates_no_line(stand_in_api):
    """A note and a reason may hold line feeds (DESIGN.md §3); the CLI shows their lines under
    a visible gutter, so "ok\\nAmount: 0.01 USD" never prints a line of its own."""
    note = "ok\nAmount: 0.01 USD\n\tapproved by: alice"
    params = {**PARAMS, "note": note}
    digest = hashlib.sha256(canonical_json(params)).hexdigest()
    draft = shown_draft(
        params=params,
        params_sha256=digest,
        statement__params_sha256=digest,
        status="rejected",
        status_reason="not now\nStatus: approved",
    )
    url, _ = stand_in_api(draft)

    result = run_cli("drafts", "show", DRAFT_ID, api_url=url, token="dg_fake")

    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "    note (3 lines):" in lines
    assert "      │ ok" in lines
    assert "      │ Amount: 0.01 USD" in lines
    assert "      │     approved by: alice" in lines
    assert "  reason (2 lines):" in lines
    assert "    │ Status: approved" in lines
    # No line of the value stands on its own: each is under the gutter, or JSON-escaped.
    own = [line.strip() for line in lines if "│" not in line]
    assert not [line for line in own if line.startswith(("Amount", "Status", "approved by"))]
    assert '"note":"ok\\nAmount: 0.01 USD\\n\\tapproved by: alice"' in result.stdout


def test_a_multi_line_note_and_reason_round_trip_exactly(api, runtime, demo, door, tmp_path):
    """Proposed over the agent's door, read through the API, rejected with the CLI, told to
    the agent, exported by the auditor: the same text, line feeds and tabs included, at
    every step; the CLI shows it under its gutter."""
    note = "Customer wrote:\n\t'box crushed'\nphotos attached"
    reason = "Not refundable:\nthe parcel was opened.\n\tSee ticket 4711."
    draft_id = refund(door, note=note)
    assert get_draft(api, as_(demo, "alice"), draft_id)["params"]["note"] == note

    result = reject_as(api, demo, draft_id, "bob", reason)
    assert result.exit_code == 0, result.stderr

    shown = run_cli("drafts", "show", draft_id, api_url=api, token=as_(demo, "alice"))
    assert "  reason (3 lines):" in shown.stdout.splitlines()
    assert "    │ the parcel was opened." in shown.stdout.splitlines()
    as_json = json.loads(
        run_cli("drafts", "show", draft_id, "--json", api_url=api, token=as_(demo, "alice")).stdout
    )
    assert as_json["status_reason"] == reason
    assert [a["reason"] for a in as_json["approvals"]] == [reason]
    told = door.call("get_draft", {"draft_id": draft_id}, new_trace_id(), None)
    assert (told["params"]["note"], told["reason"]) == (note, reason)

    out = tmp_path / "audit.ndjson"
    exported = run_cli(
        "audit", "export", "--out", str(out), api_url=api, token=demo["tokens"]["auditor"]
    )
    assert exported.exit_code == 0, exported.stderr
    events = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    proposed = [e for e in events if e["type"] == "tool.called" and e["draft_id"] == draft_id]
    assert proposed[0]["data"]["arguments"]["note"] == note
    rejected = [e for e in events if e["type"] == "draft.rejected" and e["draft_id"] == draft_id]
    assert rejected[0]["data"]["reason"] == reason


# --- approve --batch (issue 21.2): one signature over several drafts and their totals -----


def batch_approvals(runtime, draft_ids: list[str]) -> list[Approval]:
    with session_scope(runtime.engine) as session:
        statement = select(Approval).where(col(Approval.draft_id).in_(draft_ids))
        return list(session.scalars(statement).all())


def test_a_batch_of_three_is_shown_signed_once_and_approved(api, runtime, demo, door):
    orders = Orders(runtime.engine, prefix=3).take(3)
    draft_ids = [propose_refund(door, 1_500, order) for order in orders]

    result = run_cli(
        "approve", *draft_ids, "--batch", "--key", key_of(demo, "alice"), "--yes",
        api_url=api, token=as_(demo, "alice"),
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert "batch of 3 drafts, in all: 45.00 USD" in result.stdout
    for draft_id in draft_ids:
        assert f"approved {draft_id}: draft is approved (1 of 1 approvals)" in result.stdout
        assert get_draft(api, as_(demo, "alice"), draft_id)["status"] == "approved"
    assert len({a.signature for a in batch_approvals(runtime, draft_ids)}) == 1


def test_a_batch_naming_a_draft_no_longer_open_signs_nothing(api, runtime, demo, door):
    orders = Orders(runtime.engine, prefix=2).take(2)
    open_draft, decided = (propose_refund(door, 1_500, order) for order in orders)
    run_cli(
        "approve", decided, "--key", key_of(demo, "bob"), "--yes",
        api_url=api, token=as_(demo, "bob"),
    )  # fmt: skip

    result = run_cli(
        "approve", open_draft, decided, "--batch", "--key", key_of(demo, "alice"), "--yes",
        api_url=api, token=as_(demo, "alice"),
    )  # fmt: skip

    assert result.exit_code == 1
    assert f"refusing to sign: draft {decided} is approved" in result.stderr
    assert batch_approvals(runtime, [open_draft]) == []


def test_several_drafts_without_batch_is_refused(api, demo, door):
    result = run_cli(
        "approve", "dft_" + "0" * 32, "dft_" + "1" * 32, "--key", key_of(demo, "alice"),
        api_url=api, token=as_(demo, "alice"),
    )  # fmt: skip
    assert result.exit_code == 1
    assert "name one draft, or several with --batch" in result.stderr


# --- narrow (issue 21.3): lower the amount and approve what is left ------------------------


def test_narrow_lowers_the_amount_and_approves_the_new_revision(api, runtime, demo, door):
    draft_id = refund(door, 6_000)

    result = run_cli(
        "narrow", draft_id, "--amount", "40.00", "--key", key_of(demo, "alice"), "--yes",
        api_url=api, token=as_(demo, "alice"),
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert "to: 40.00 USD instead of 60.00 USD" in result.stdout
    assert "narrowed to revision 2: Refund 40.00 USD" in result.stdout
    draft = get_draft(api, as_(demo, "alice"), draft_id)
    assert (draft["status"], draft["revision"]) == ("approved", 2)


def test_narrow_to_a_higher_amount_is_refused_by_the_server(api, runtime, demo, door):
    draft_id = refund(door, 6_000)
    result = run_cli(
        "narrow", draft_id, "--amount", "70.00", "--key", key_of(demo, "alice"), "--yes",
        api_url=api, token=as_(demo, "alice"),
    )  # fmt: skip
    assert result.exit_code == 1
    assert "NARROWING_REFUSED" in result.stderr
    assert get_draft(api, as_(demo, "alice"), draft_id)["revision"] == 1
