"""A pydantic-ai agent proposes a refund through draftgate, then waits for the human's
decision and the execution without polling.

    ./run python examples/pydantic_ai_example.py [.draftgate/demo.json]

The model is scripted with pydantic-ai's own `FunctionModel` (no API key needed): it calls
`propose_refund` once, then answers with the tool's message. Everything else is the
framework's real path: `MCPToolset` over streamable HTTP with the agent's bearer token.
`tool_error_behavior="failed"`: a business refusal (draftgate's error object) goes back to
the model to act on, instead of being retried blindly or ending the run.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from follow import draft_uri_in, manifest, report, wait_for_outcome
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel


def scripted(arguments: dict[str, Any]) -> FunctionModel:
    def turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [
            part
            for message in messages
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolReturnPart)
        ]
        if not returned:
            return ModelResponse(parts=[ToolCallPart("propose_refund", arguments)])
        # A draft's result: its JSON (parsed by pydantic-ai) and the link to its resource.
        said = returned[-1].content
        view = said[0] if isinstance(said, list) else said
        view = view if isinstance(view, dict) else json.loads(str(view))
        return ModelResponse(parts=[TextPart(f"{view['message']} ({view['resource_uri']})")])

    return FunctionModel(turn)


async def main() -> None:
    demo = manifest()
    token = demo["tokens"]["agent"]
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1400, "currency": "USD"},
        "reason": "damaged",
    }
    toolset = MCPToolset(
        demo["mcp_url"],
        headers={"Authorization": f"Bearer {token}"},
        tool_error_behavior="failed",
    )
    agent = Agent(scripted(arguments), toolsets=[toolset])
    async with agent:
        result = await agent.run("My order arrived damaged; please refund 14.00 USD.")
    print("agent:", result.output)
    report(await wait_for_outcome(demo["mcp_url"], token, draft_uri_in(result.output)))


if __name__ == "__main__":
    asyncio.run(main())
