"""``draftgate webhooks add|list|test|deliveries|remove`` as an admin runs them: in-process, with
only an API URL and a bearer token, against a real API server (tests/support/cli.py) and a
real receiver on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import select

from service.db import session_scope
from service.webhooks.delivery import deliver
from service.webhooks.models import WebhookDelivery
from tests.service.webhooks.receiver import receiving
from tests.support import cli


@pytest.fixture(scope="module")
def api_hosts(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[cli.ApiHosts]:
    # The receiver listens on 127.0.0.1, which webhooks may reach only when allowed.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAFTGATE_WEBHOOK_ALLOW_PRIVATE_ADDRESSES", "true")
        with cli.api_hosts(tmp_path_factory, sqlite_template) as hosts:
            yield hosts


@pytest.fixture
def served(api_hosts: cli.ApiHosts, request: pytest.FixtureRequest) -> cli.Served:
    return api_hosts.fresh("sqlite", request)


def run(served: cli.Served, *args: str, token: str = "admin") -> Any:
    env = {"DRAFTGATE_API_URL": served.url, "DRAFTGATE_TOKEN": served.demo["tokens"][token]}
    return cli.run("webhooks", *args, env=env)


def test_an_admin_manages_a_webhook_from_the_terminal(served):
    with receiving() as receiver:
        added = run(served, "add", receiver.url, "--event", "draft.proposed", "--json")
        assert added.exit_code == 0, added.stderr
        created = json.loads(added.stdout)
        receiver.secret = created["secret"]
        endpoint_id = created["endpoint_id"]

        listed = run(served, "list")
        pinged = run(served, "test", endpoint_id)
        with session_scope(served.runtime.engine) as session:
            (ping,) = session.exec(select(WebhookDelivery)).all()
        assert deliver(served.runtime, ping.id).status == "delivered"
        log = run(served, "deliveries", endpoint_id)
        removed = run(served, "remove", endpoint_id)
        after = run(served, "list", "--json")

    assert created["events"] == ["draft.proposed"]
    assert created["secret"].startswith("whsec_")
    assert endpoint_id in listed.stdout
    assert created["secret"] not in listed.stdout
    assert pinged.exit_code == 0
    assert f"ping {ping.id}: pending" in pinged.stdout
    assert [e["type"] for e in receiver.verified_events()] == ["webhook.test"]
    assert "webhook.test" in log.stdout
    assert "delivered" in log.stdout
    assert "204 in" in log.stdout
    assert removed.exit_code == 0
    assert f"removed {endpoint_id}" in removed.stdout
    assert json.loads(after.stdout) == {"endpoints": []}


def test_the_secret_is_printed_once_with_a_warning(served):
    added = run(served, "add", "https://hooks.example/x")

    assert added.exit_code == 0, added.stderr
    assert "secret:     whsec_" in added.stdout
    assert "cannot be shown again" in added.stderr


def test_refusals_exit_1_with_the_code(served):
    refused_url = run(served, "add", "http://hooks.example/x")
    not_admin = run(served, "list", token="approver_alice")
    unknown = run(served, "remove", "whk_" + "0" * 24)

    assert refused_url.exit_code == 1
    assert "WEBHOOK_URL_REFUSED" in refused_url.stderr
    assert not_admin.exit_code == 1
    assert "PERMISSION_DENIED" in not_admin.stderr
    assert unknown.exit_code == 1
    assert "WEBHOOK_UNAVAILABLE" in unknown.stderr
