"""Tool specifications, independent of any transport."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, create_model

from service.drafts.schemas import DRAFT_ID_PATTERN
from service.validation import StrictInput

IDEMPOTENCY_KEY_PATTERN = r"^[\x20-\x7E]{1,255}$"
CONTROL_FIELDS = frozenset({"idempotency_key", "draft_id"})


class ToolKind(StrEnum):
    READ = "read"
    PROPOSE = "propose"
    DRAFT_STATUS = "draft_status"
    # Not tools: what an agent does with its drafts through other MCP methods (resources,
    # tasks), run, refused and audited like a tool call (toolcalls.actions.METHODS).
    DRAFT_LIST = "draft_list"
    WITHDRAW = "withdraw"


@dataclass(frozen=True)
class ToolSpec:
    """One tool as offered to agents. Hints are advice to clients; the server enforces."""

    name: str
    title: str
    description: str
    kind: ToolKind
    action: str | None
    input_model: type[StrictInput]
    output_model: type[BaseModel]
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


class GetDraftInput(StrictInput):
    draft_id: str = Field(
        pattern=DRAFT_ID_PATTERN, description="The draft_id a propose_* call returned."
    )


class DraftRef(StrictInput):
    """The draft a resource URI or a task id names, and for a task the revision it follows."""

    draft_id: str = Field(pattern=DRAFT_ID_PATTERN)
    revision: int | None = Field(default=None, ge=1, le=2**31 - 1)


class DraftPageInput(StrictInput):
    cursor: str | None = Field(default=None, min_length=1, max_length=512)


def propose_input_model(name: str, action_input: type[StrictInput]) -> type[StrictInput]:
    """The action's own arguments plus the two control arguments every proposal accepts."""
    model: type[StrictInput] = create_model(
        f"Propose{name.title().replace('_', '')}Input",
        __base__=action_input,
        idempotency_key=(
            str | None,
            Field(
                default=None,
                pattern=IDEMPOTENCY_KEY_PATTERN,
                description="Optional, 1-255 printable ASCII characters. Retrying with the "
                "same key and the same arguments returns the same draft. Without a key, an "
                "identical proposal while the first is still open also returns that draft, so "
                "a retry never makes a duplicate; use a key to make retries explicit.",
            ),
        ),
        draft_id=(
            str | None,
            Field(
                default=None,
                pattern=DRAFT_ID_PATTERN,
                description="Optional: revise this pending draft of yours instead of creating "
                "a new one. Earlier approvals then no longer count.",
            ),
        ),
    )
    return model


def control_arguments(params: BaseModel) -> dict[str, Any]:
    return {name: getattr(params, name) for name in CONTROL_FIELDS if getattr(params, name, None)}
