"""A LangChain / LangGraph agent proposes a refund through draftgate, then waits for the
human's decision and the execution without polling.

    ./run python examples/langgraph_example.py [.draftgate/demo.json]

The chat model is scripted (no API key needed): it calls `propose_refund` once, then
answers. Everything else is the framework's real path: draftgate's tools loaded over MCP by
`langchain.mcp.MCPAdapter`, bound strictly, and run by `create_agent`'s LangGraph loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastmcp import Client as FastMCPClient
from fastmcp.client.transports import StreamableHttpTransport
from follow import draft_uri_in, manifest, report, wait_for_outcome
from langchain.agents import create_agent
from langchain.mcp import MCPAdapter
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage


class ScriptedChatModel(FakeMessagesListChatModel):
    """Its answers are fixed in advance; binding tools changes nothing about them."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


async def main() -> None:
    demo = manifest()
    token = demo["tokens"]["agent"]
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1300, "currency": "USD"},
        "reason": "damaged",
    }
    model = ScriptedChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[{"name": "propose_refund", "args": arguments, "id": "call-1"}],
            ),
            AIMessage(content="Your refund is waiting for a person to approve it."),
        ]
    )
    transport = StreamableHttpTransport(
        demo["mcp_url"], headers={"Authorization": f"Bearer {token}"}
    )
    async with MCPAdapter(FastMCPClient(transport)) as adapter:
        agent = create_agent(model, await adapter.list_tools())
        state = await agent.ainvoke({"messages": [("user", "Refund my damaged order, 13.00 USD.")]})
    print("agent:", state["messages"][-1].content)
    report(await wait_for_outcome(demo["mcp_url"], token, draft_uri_in(state["messages"])))


if __name__ == "__main__":
    asyncio.run(main())
