"""Driving the console as an approver would, and the agent beside it over real MCP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import anyio

from tests.support.mcp_client import connect

T = TypeVar("T")
ORDER = "ORD-1004"  # delivered 3 days ago, total 785.00 USD
SMALL = 1_500  # 15.00 USD: one approver
LARGE = 60_000  # 600.00 USD: alice AND bob
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "img"


def in_own_loop(make: Callable[[], Awaitable[T]]) -> T:
    """Run an async MCP exchange to completion on a thread of its own: Playwright's sync API
    keeps an event loop on the test's thread, where a second one cannot run."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, make).result()


def call_tool(mcp_url: str, token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tool call by the agent over streamable HTTP; its structured result."""

    async def exchange() -> dict[str, Any]:
        async with connect(mcp_url, token) as agent:
            result = await agent.call_tool(tool, arguments)
        assert not result.is_error, result.content
        content: dict[str, Any] = result.structured_content or {}
        return content

    return in_own_loop(exchange)


def propose_refund(
    stack: Any, amount_minor: int, note: str | None = None, order: str = ORDER
) -> str:
    arguments: dict[str, Any] = {
        "order_id": order,
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
    }
    if note is not None:
        arguments["note"] = note
    proposed = call_tool(stack.mcp_url, stack.demo["tokens"]["agent"], "propose_refund", arguments)
    draft_id: str = proposed["draft_id"]
    return draft_id


def agent_view(stack: Any, draft_id: str) -> dict[str, Any]:
    return call_tool(
        stack.mcp_url, stack.demo["tokens"]["agent"], "get_draft", {"draft_id": draft_id}
    )


def sign_in(page: Any, token: str) -> None:
    page.goto("/console/sign-in")
    page.fill('input[name="token"]', token)
    page.click('form[action="/console/sign-in"] button[type="submit"]')
    page.wait_for_url("**/console/")


def import_key(page: Any, demo: dict[str, Any], approver: str) -> str:
    """Import the demo key file of ``approver`` on the keys page; returns its key id."""
    key = demo["approvers"][approver]
    page.goto("/console/keys")
    page.fill("#key-id", key["key_id"])
    page.set_input_files("#key-file", key["private_key_file"])
    if page.locator("#import-key").count():
        page.click("#import-key")
    wait_for_text(page, "#keys-status", "imported ")
    key_id: str = key["key_id"]
    return key_id


def open_card(page: Any, draft_id: str) -> None:
    page.goto(f"/console/drafts/{draft_id}")
    page.wait_for_selector("body[data-card-ready='true']", state="attached")


def wait_for_text(page: Any, selector: str, fragment: str) -> str:
    """Wait until the element's text contains ``fragment``; its whole text then."""
    # A function, not an expression: the console's CSP forbids the eval an expression needs.
    page.wait_for_function(
        "([selector, fragment]) => (document.querySelector(selector)?.textContent || '')"
        ".includes(fragment)",
        arg=[selector, fragment],
    )
    return text_of(page, selector)


def text_of(page: Any, selector: str) -> str:
    content: str = page.locator(selector).text_content() or ""
    return content


def screenshot(page: Any, name: str) -> None:
    """docs/img/<name>.png, only when DRAFTGATE_SCREENSHOTS=1 (CI must not rewrite them)."""
    import os

    if os.environ.get("DRAFTGATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
