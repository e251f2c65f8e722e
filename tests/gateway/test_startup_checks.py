"""Declarations checked against a real upstream (the ticket desk over streamable HTTP) when
draftgate starts and by ``draftgate gateway check`` / ``reload``; and contract versions
that follow the upstream's schema."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlmodel import select
from typer.testing import CliRunner

from service.cli.gateway import app as gateway_cli
from service.config import DEFAULT_POLICIES, Settings, child_environment, get_settings
from service.db import make_engine, session_scope
from service.errors import DomainError
from service.gateway.build import _fingerprint, build_gateway
from service.gateway.errors import GatewayError
from service.gateway.mcp_client import pool
from service.gateway.models import GatewayContract
from service.registry.base import ActionContext, WriteAction
from service.runtime import build_runtime
from service.sql import utcnow
from tests.gateway.upstreams.processes import UpstreamProcess


@pytest.fixture
def fresh_desk(upstream_mcp_http: UpstreamProcess) -> Iterator[UpstreamProcess]:
    """A desk of the test's own, for a test that changes it."""
    yield upstream_mcp_http
    pool().close()


def write_file(tmp_path: Path, url: str, tools: dict[str, Any]) -> Path:
    path = tmp_path / "gateway.yaml"
    declaration = {
        "version": 1,
        "mcp": [{"namespace": "desk", "transport": "http", "url": url, "tools": tools}],
    }
    path.write_text(yaml.safe_dump(declaration, sort_keys=False), encoding="utf-8")
    return path


GOOD_TOOLS: dict[str, Any] = {
    "get_ticket": {"kind": "read"},
    "create_ticket": {"kind": "write", "summary": "Open ticket {title}"},
    "issue_credit": {
        "kind": "write",
        "summary": "Credit {amount_cents|money:currency}",
        "money": {"amount_minor": "amount_cents", "currency": "currency"},
    },
}


def settings_for(path: Path, sqlite_url: str, tmp_path: Path, **extra: Any) -> Settings:
    return Settings(
        state_dir=tmp_path / "state", database_url=sqlite_url, gateway_file=path, **extra
    )


def test_a_good_file_adds_the_tools_beside_the_shop(desk, sqlite_url, tmp_path):
    path = write_file(tmp_path, desk.mcp_url, GOOD_TOOLS)
    runtime = build_runtime(settings_for(path, sqlite_url, tmp_path))
    try:
        assert set(runtime.registry.reads) >= {"desk_get_ticket", "get_order", "list_orders"}
        assert set(runtime.registry.writes) >= {"desk_create_ticket", "desk_issue_credit", "refund"}
        with session_scope(runtime.engine) as session:
            rows = session.exec(select(GatewayContract)).all()
        assert {(r.action, r.contract_version) for r in rows} == {
            ("desk_create_ticket", 1),
            ("desk_issue_credit", 1),
        }
    finally:
        runtime.engine.dispose()


@pytest.mark.parametrize(
    ("tools", "policies", "named"),
    [
        (
            {**GOOD_TOOLS, "close_ticket": {"kind": "write", "summary": "Close it"}},
            {},
            "gateway.yaml:18: mcp[0].tools.close_ticket: declared, but the upstream has no tool",
        ),
        (
            {**GOOD_TOOLS, "issue_credit": {"kind": "write", "summary": "A credit"}},
            {
                "desk_issue_credit": {
                    "tiers": {"EUR": [{"up_to": "10", "approvals": 1}, {"approvals": 2}]}
                }
            },
            "gateway.yaml:12: mcp[0].tools.issue_credit: the policy of desk_issue_credit has "
            "amount tiers, but the declaration names no money path",
        ),
        (
            {**GOOD_TOOLS, "create_ticket": {"kind": "write", "summary": "Open {titel}"}},
            {},
            "gateway.yaml:11: mcp[0].tools.create_ticket.summary: placeholder {titel}: the input "
            "has no field 'titel'",
        ),
        (
            {
                **GOOD_TOOLS,
                "create_ticket": {"kind": "write", "summary": "x", "idempotency_argument": "key"},
            },
            {},
            "gateway.yaml:12: mcp[0].tools.create_ticket.idempotency_argument: 'key' is not an "
            "argument",
        ),
    ],
)
def test_a_declaration_error_stops_the_start_naming_it(
    desk, sqlite_url, tmp_path, tools, policies, named
):
    path = write_file(tmp_path, desk.mcp_url, tools)
    settings = settings_for(path, sqlite_url, tmp_path, policies={**DEFAULT_POLICIES, **policies})
    with pytest.raises(GatewayError) as refused:
        build_runtime(settings)
    [problem] = refused.value.problems  # every problem is one line naming its own line
    assert problem.startswith(f"{path.parent}/")
    assert named in problem


def test_names_taken_by_other_actions_are_refused(desk, tmp_path):
    path = write_file(tmp_path, desk.mcp_url, GOOD_TOOLS)
    with pytest.raises(GatewayError) as refused:
        build_gateway(path, reserved=["desk_get_ticket"])
    assert refused.value.problems == [
        f"{path}:7: mcp[0].tools.get_ticket: it maps to desk_get_ticket, the name of an "
        "existing action; use another namespace"
    ]


def test_an_unreachable_upstream_stops_the_start(sqlite_url, tmp_path):
    path = write_file(tmp_path, "http://127.0.0.1:9/mcp", GOOD_TOOLS)
    with pytest.raises(GatewayError, match="cannot read the upstream's tools"):
        build_runtime(settings_for(path, sqlite_url, tmp_path))


def test_check_lists_undeclared_tools_and_fails_on_problems(desk, tmp_path):
    path = write_file(tmp_path, desk.mcp_url, GOOD_TOOLS)
    result = CliRunner().invoke(gateway_cli, ["check", "--file", str(path)])
    assert result.exit_code == 0, result.output
    assert "propose_desk_issue_credit" in result.output
    assert "desk_get_ticket" in result.output
    undeclared = next(line for line in result.output.splitlines() if "undeclared" in line)
    assert "delete_all_tickets" in undeclared
    assert "archive_ticket" in undeclared

    broken = write_file(tmp_path, desk.mcp_url, {"ghost": {"kind": "read"}})
    result = CliRunner().invoke(gateway_cli, ["check", "--file", str(broken)])
    assert result.exit_code == 1
    assert f"problem: {broken}:7: mcp[0].tools.ghost: declared, but the upstream" in result.output


def test_a_read_the_upstream_says_writes_is_listed_by_check_and_logged_at_start(
    desk, sqlite_url, tmp_path, caplog
):
    tools = {**GOOD_TOOLS, "delete_all_tickets": {"kind": "read"}}  # destructiveHint: true
    path = write_file(tmp_path, desk.mcp_url, tools)

    result = CliRunner().invoke(gateway_cli, ["check", "--file", str(path)])
    with caplog.at_level(logging.WARNING, logger="service.gateway.build"):
        runtime = build_runtime(settings_for(path, sqlite_url, tmp_path))
    runtime.engine.dispose()

    assert result.exit_code == 0, result.output
    warning = next(line for line in result.output.splitlines() if line.startswith("warning:"))
    assert "tools.delete_all_tickets: declared read but the upstream says it writes" in warning
    assert "get_ticket" not in warning
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("delete_all_tickets: declared read but the upstream says it" in m for m in logged)


def test_an_mcp_writes_contract_covers_where_the_upstream_is(desk, tmp_path):
    def fingerprints(url: str, **server: Any) -> dict[str, str]:
        path = write_file(tmp_path, url, GOOD_TOOLS)
        if server:
            declared = yaml.safe_load(path.read_text())
            declared["mcp"][0].update(server)
            path.write_text(yaml.safe_dump(declared), encoding="utf-8")
        report = build_gateway(path)
        assert report.problems == []
        return {a.name: _fingerprint(a) for a in report.actions if isinstance(a, WriteAction)}

    here = fingerprints(desk.mcp_url)
    elsewhere = fingerprints(desk.mcp_url.replace("127.0.0.1", "localhost"))
    with_header = fingerprints(desk.mcp_url, headers={"X-Tenant": "acme"})

    assert set(here) == {"desk_create_ticket", "desk_issue_credit"}
    for name in here:
        assert len({here[name], elsewhere[name], with_header[name]}) == 3
    assert fingerprints(desk.mcp_url) == here


def test_a_changed_upstream_schema_is_a_new_contract_version(
    fresh_desk: UpstreamProcess, db_url, tmp_path, monkeypatch
):
    # On SQLite and PostgreSQL: the versions are rows both must settle.
    path = write_file(tmp_path, fresh_desk.mcp_url, GOOD_TOOLS)
    settings = settings_for(path, db_url, tmp_path)
    runtime = build_runtime(settings)
    try:
        before = runtime.registry.writes["desk_create_ticket"]
        assert before.contract_version == 1
        ctx = ActionContext(
            session=None,  # type: ignore[arg-type]  # the gateway's validate needs none
            principal=None,  # type: ignore[arg-type]
            settings=settings,
            now=utcnow(),
        )
        params = before.Input.model_validate({"title": "Printer", "priority": "low"})
        assert before.validate(ctx, params).summary == "Open ticket Printer"

        # The upstream swaps create_ticket's schema and announces tools/list_changed: the
        # running process re-reads its catalogue and stops proposing under the old one.
        spec = before.spec  # type: ignore[attr-defined]
        pool().call_tool(spec, "set_schema_version", {"version": 2})
        changed = wait_for(lambda: _refused(before, ctx, params))
        assert changed.code == "UPSTREAM_CONTRACT_CHANGED"
        with pytest.raises(DomainError) as at_execution:  # and the worker never calls it
            before.execute(ctx, params, "dft_x:1")
        assert at_execution.value.code == "UPSTREAM_CONTRACT_CHANGED"

        # `draftgate gateway reload` records the new schema as version 2 for every process.
        monkeypatch.setenv("DRAFTGATE_GATEWAY_FILE", str(path))
        monkeypatch.setenv("DRAFTGATE_DATABASE_URL", db_url)
        monkeypatch.setenv("DRAFTGATE_STATE_DIR", str(tmp_path / "state"))
        get_settings.cache_clear()  # the command reads the environment once per process
        try:
            result = CliRunner().invoke(gateway_cli, ["reload", "--json"])
        finally:
            get_settings.cache_clear()
        assert result.exit_code == 0, result.output
        assert '"tool": "propose_desk_create_ticket"' in result.output
        engine = make_engine(db_url)
        with session_scope(engine) as session:
            versions = {
                (r.action, r.contract_version) for r in session.exec(select(GatewayContract)).all()
            }
        engine.dispose()
        assert versions == {
            ("desk_create_ticket", 1),
            ("desk_create_ticket", 2),
            ("desk_issue_credit", 1),
        }
        restarted = build_runtime(settings)
        assert restarted.registry.writes["desk_create_ticket"].contract_version == 2
        assert restarted.registry.writes["desk_issue_credit"].contract_version == 1
        restarted.engine.dispose()
    finally:
        runtime.engine.dispose()


def _refused(action: Any, ctx: Any, params: Any) -> DomainError | None:
    try:
        action.validate(ctx, params)
    except DomainError as error:
        return error
    return None


def wait_for(probe: Any, timeout: float = 30) -> Any:
    import time

    deadline = time.monotonic() + timeout
    while (found := probe()) is None:
        assert time.monotonic() < deadline, "the catalogue was not re-read"
        time.sleep(0.05)
    return found


def test_the_mcp_server_process_refuses_to_start_naming_the_problem(
    desk, sqlite_url, tmp_path, free_tcp_port
):
    tools = {**GOOD_TOOLS, "close_ticket": {"kind": "write", "summary": "Close it"}}
    path = write_file(tmp_path, desk.mcp_url, tools)
    env = child_environment(settings_for(path, sqlite_url, tmp_path))
    started = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "mcp", "--port", str(free_tcp_port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 2
    assert "Traceback" not in started.stderr
    # The catalogue read is logged before it (INFO, on stderr); the refusal is the last line.
    assert started.stderr.splitlines()[-1] == (
        f"{path}:18: mcp[0].tools.close_ticket: declared, but the upstream has no tool of this name"
    )
