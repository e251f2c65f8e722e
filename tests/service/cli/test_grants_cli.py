"""``draftgate grants`` (issue 21.1) against a real API server: the approver reads the grant
in words, signs it with their key, lists it, and revokes it; a refund within it is approved
at its proposal; a server that offers a statement other than the terms asked is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import typer

from mcp_adapter.tools import ToolDoor
from service.api.app import create_app
from service.cli.grants import check_offer
from service.config import DEMO_POLICIES
from tests.service.executions.test_runner import propose_refund
from tests.support import cli
from tests.support.api_client import get_draft, served


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"policies": DEMO_POLICIES}


@pytest.fixture
def api(runtime, demo) -> Iterator[str]:
    with served(create_app(runtime)) as client:
        yield str(client.base_url).rstrip("/")


def grants(api: str, demo: dict[str, Any], *args: str, who: str = "alice") -> cli.Result:
    env = {"DRAFTGATE_API_URL": api, "DRAFTGATE_TOKEN": demo["tokens"][f"approver_{who}"]}
    return cli.run("grants", *args, env=env)


def key_of(demo: dict[str, Any], who: str = "alice") -> str:
    return str(demo["approvers"][who]["private_key_file"])


def test_an_approver_signs_lists_and_revokes_a_grant_from_the_terminal(api, runtime, demo):
    created = grants(
        api,
        demo,
        "create",
        "--action", "refund",
        "--max", "20.00",
        "--cap", "50.00",
        "--for", "24h",
        "--key", key_of(demo),
        "--yes",
    )  # fmt: skip
    assert created.exit_code == 0, created.stderr
    assert "grant: refund drafts up to 20.00 USD each, at most 50.00 USD a day, for 24 h" in (
        created.stdout
    )
    grant_id = created.stdout.split("granted ", 1)[1].split(":", 1)[0]

    door = ToolDoor(runtime, stdio_token=demo["tokens"]["agent"])
    draft_id = propose_refund(door, 1_500)
    draft = get_draft_as(api, demo, draft_id)
    assert draft["status"] == "approved"
    assert [a["grant_id"] for a in draft["approvals"]] == [grant_id]

    listed = grants(api, demo, "list")
    assert listed.exit_code == 0, listed.stderr
    assert grant_id in listed.stdout
    assert "active" in listed.stdout

    not_bobs = grants(api, demo, "revoke", grant_id, who="bob")
    assert not_bobs.exit_code == 1
    assert "GRANT_UNAVAILABLE" in not_bobs.stderr
    revoked = grants(api, demo, "revoke", grant_id)
    assert revoked.exit_code == 0, revoked.stderr
    assert f"revoked {grant_id} (1 drafts covered)" in revoked.stdout
    assert get_draft_as(api, demo, draft_id)["approvals"][0]["problem"] == "the grant was revoked"


def get_draft_as(api: str, demo: dict[str, Any], draft_id: str) -> dict[str, Any]:
    with httpx.Client(base_url=api) as client:
        return get_draft(client, demo["tokens"]["approver_alice"], draft_id)


def test_a_grant_the_policy_does_not_allow_is_refused_and_nothing_is_signed(api, demo):
    result = grants(
        api, demo, "create", "--action", "cancel_order", "--for", "1h", "--key", key_of(demo),
        "--yes",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "GRANT_NOT_ALLOWED" in result.stderr
    assert "grant:" not in result.stdout


def test_a_duration_that_is_no_duration_is_a_usage_error(api, demo):
    result = grants(
        api, demo, "create", "--action", "refund", "--for", "a while", "--key", key_of(demo)
    )
    assert result.exit_code == 2
    assert "is not a duration" in result.stderr


@pytest.mark.parametrize(
    "offered",
    [
        {"max_amount_minor": 200_000},  # more than asked
        {"agent": None},  # a limit asked for, dropped
        {"source_ref": "order:ORD-1"},  # a limit nobody asked for (harmless or not: not signed)
    ],
)
def test_a_statement_other_than_the_terms_asked_is_never_signed(offered):
    asked = {"action": "refund", "currency": "USD", "max_amount_minor": 2_000, "agent": "bot"}
    statement = {**asked, "type": "draftgate.grant.v1", "tenant": "demo", "duration_seconds": 1}
    statement = {k: v for k, v in {**statement, **offered}.items() if v is not None}
    statement.pop("duration_seconds")
    with pytest.raises(typer.Exit):
        check_offer(asked, statement)
    check_offer(asked, {**asked, "type": "draftgate.grant.v1", "tenant": "demo"})
