"""A FastMCP client proposes a refund through draftgate, then waits for the human's decision
and the execution without polling.

    ./run python examples/fastmcp_example.py [.draftgate/demo.json]

FastMCP's client calls the tool (its `call_tool` raises on an error result, so a business
refusal arrives as `ToolError` carrying draftgate's error object); its 4.x client has no
`subscriptions/listen`, so the wait uses the MCP SDK's (examples/follow.py).
"""

from __future__ import annotations

import asyncio

from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from follow import manifest, report, wait_for_outcome


async def main() -> None:
    demo = manifest()
    token = demo["tokens"]["agent"]
    transport = StreamableHttpTransport(
        demo["mcp_url"], headers={"Authorization": f"Bearer {token}"}
    )
    async with Client(transport) as client:
        result = await client.call_tool(
            "propose_refund",
            {
                "order_id": demo["orders"]["delivered"],
                "amount": {"amount_minor": 1500, "currency": "USD"},
                "reason": "damaged",
            },
        )
    draft = result.structured_content or {}
    print("proposed:", draft["message"])
    report(await wait_for_outcome(demo["mcp_url"], token, draft["resource_uri"]))


if __name__ == "__main__":
    asyncio.run(main())
