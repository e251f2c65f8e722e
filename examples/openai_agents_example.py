"""An OpenAI Agents SDK agent proposes a refund through draftgate, then waits for the human's
decision and the execution without polling.

    ./run python examples/openai_agents_example.py [.draftgate/demo.json]

The model is scripted (no API key needed): it calls `propose_refund` once, then answers with
what the tool said. Everything else is the framework's real path: draftgate's tools listed
over MCP, converted to strict schemas, called through the Agents SDK's MCP server class.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from follow import draft_uri_in, manifest, report, wait_for_outcome
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def relay(output: Any) -> str:
    """What the model tells the user: the draft's message and where to follow it. A draft's
    result reaches the model as its JSON text and a link to its resource."""
    items = output if isinstance(output, list) else [{"text": output}]
    view = json.loads(items[0]["text"])
    return f"{view['message']} (follow it at {view['resource_uri']})"


class ScriptedModel(Model):
    """Calls propose_refund once, then relays the tool's message, as a real model would."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        outputs = [
            item
            for item in input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        if not outputs:
            call = ResponseFunctionToolCall(
                type="function_call",
                call_id="call-1",
                name="propose_refund",
                arguments=json.dumps(self.arguments),
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        said = ResponseOutputText(
            type="output_text", text=relay(outputs[-1]["output"]), annotations=[]
        )
        message = ResponseOutputMessage(
            type="message", id="msg-1", role="assistant", status="completed", content=[said]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example runs without streaming")


async def main() -> None:
    set_tracing_disabled(True)  # no OpenAI account here to send traces to
    demo = manifest()
    token = demo["tokens"]["agent"]
    arguments = {
        "order_id": demo["orders"]["delivered"],
        "amount": {"amount_minor": 1200, "currency": "USD"},
        "reason": "damaged",
        "note": None,  # strict schemas make every field required: null means omitted
        "idempotency_key": None,
        "draft_id": None,
    }
    server = MCPServerStreamableHttp(
        {"url": demo["mcp_url"], "headers": {"Authorization": f"Bearer {token}"}},
        cache_tools_list=True,
    )
    async with server:
        agent = Agent(
            name="support",
            instructions="Help the customer; changes need a human's approval.",
            model=ScriptedModel(arguments),
            mcp_servers=[server],
            mcp_config={"convert_schemas_to_strict": True},
        )
        result = await Runner.run(agent, "My order arrived damaged; please refund 12.00 USD.")
    print("agent:", result.final_output)
    report(await wait_for_outcome(demo["mcp_url"], token, draft_uri_in(result.final_output)))


if __name__ == "__main__":
    asyncio.run(main())
