"""Wait for a draft's outcome without polling: subscribe to its MCP resource and read it again
on each change, until its status is final. Shared by the framework examples beside it.

    outcome = asyncio.run(wait_for_outcome(mcp_url, token, "draftgate://drafts/dft_…"))
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

FINAL = {"succeeded", "failed", "rejected", "expired", "withdrawn"}
DRAFT_URI = re.compile(r"draftgate://drafts/dft_[0-9a-f]{32}")


def manifest() -> dict[str, Any]:
    """The deployment to talk to: the demo manifest `draftgate dev` writes (or the path given
    as the first argument)."""
    path = Path(sys.argv[1] if len(sys.argv) > 1 else ".draftgate/demo.json")
    demo: dict[str, Any] = json.loads(path.read_text())
    return demo


def draft_uri_in(anything: Any) -> str:
    """The draft resource a framework's run result mentions (in the tool's output)."""
    found = DRAFT_URI.search(str(anything))
    if found is None:
        raise SystemExit("the agent did not propose anything")
    return found.group(0)


async def wait_for_outcome(mcp_url: str, token: str, uri: str) -> dict[str, Any]:
    """The draft as get_draft shows it, once it has ended: pushed, not polled."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=None)) as http,
        Client(streamable_http_client(mcp_url, http_client=http)) as client,
        client.listen(resource_subscriptions=[uri]) as changes,
    ):
        draft = await _read(client, uri)  # it may have changed before the listen
        if draft["status"] in FINAL:
            return draft
        async for _change in changes:
            draft = await _read(client, uri)
            if draft["status"] in FINAL:
                return draft
    return draft  # the stream ended: the last state read


async def _read(client: Client, uri: str) -> dict[str, Any]:
    contents = (await client.read_resource(uri)).contents[0]
    draft: dict[str, Any] = json.loads(getattr(contents, "text", "{}"))
    return draft


def report(draft: dict[str, Any]) -> None:
    print(f"outcome: {draft['status']}: {draft['message']}")
    if draft.get("outcome"):
        print("result:", json.dumps(draft["outcome"], sort_keys=True))
