"""Issue 10's acceptance as a new user meets it: ``draftgate dev`` prints the console's URL;
in Chromium, the demo's approver_alice signs in with her token, imports her key file and
approves a refund the agent proposed over MCP; it is executed exactly once.

Nothing here is set up by the tests' stack helpers: the processes, ports, public URL and
demo data are the ones ``draftgate dev`` makes, read back from its banner and manifest.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, text

from harness.dev import draftgate_dev
from tests.console.helpers import SMALL, agent_view, import_key, open_card, propose_refund, sign_in

pytestmark = pytest.mark.full


def test_the_dev_console_approves_a_proposed_draft_and_it_runs_once(browser, tmp_path: Path):
    with draftgate_dev(tmp_path / "state", tmp_path / "dev.log") as dev:
        console = dev.banner("console")
        assert console, dev.output()
        api_port = dev.api_url.rsplit(":", 1)[1]
        assert console == f"http://localhost:{api_port}/console/"
        manifest = dev.manifest()
        agent = SimpleNamespace(mcp_url=manifest["mcp_url"], demo=manifest)
        draft_id = propose_refund(agent, SMALL, note="The lid arrived cracked.")

        context = browser.new_context(base_url=console.removesuffix("/console/"))
        context.set_default_timeout(30_000)
        try:
            page = context.new_page()
            sign_in(page, manifest["tokens"]["approver_alice"])
            assert page.locator(f"[data-draft-id='{draft_id}']").count() >= 1, page.content()
            import_key(page, manifest, "alice")
            open_card(page, draft_id)
            page.click("#approve")
            page.wait_for_function(
                "() => (document.querySelector('#decision-status')?.textContent || '')"
                ".includes('approved revision')"
            )
            page.locator("#execute").wait_for(state="visible")
            page.click("#execute")
            page.wait_for_function(
                "() => /succeeded|failed/.test("
                "document.querySelector('#execution-status')?.textContent || '')"
            )
            assert "succeeded" in (page.locator("#execution-status").text_content() or "")
        finally:
            context.close()

        assert agent_view(agent, draft_id)["status"] == "succeeded"
        engine = create_engine(f"sqlite:///{tmp_path / 'state' / 'draftgate.db'}")
        try:
            with engine.connect() as connection:
                refunds = connection.execute(
                    text("SELECT count(*) FROM shop_refunds WHERE idempotency_key LIKE :key"),
                    {"key": f"{draft_id}:%"},
                ).scalar_one()
                executions = connection.execute(
                    text("SELECT count(*) FROM executions WHERE draft_id = :id"), {"id": draft_id}
                ).scalar_one()
        finally:
            engine.dispose()
        assert (refunds, executions) == (1, 1)
