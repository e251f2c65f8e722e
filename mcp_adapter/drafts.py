"""An agent's drafts through MCP methods other than tools: resources and tasks.

Every draft is a resource ``draftgate://drafts/<draft_id>`` and, for clients that declare the
tasks extension (``io.modelcontextprotocol/tasks``, MCP 2026-07-28), a proposal is a task
whose id names the draft and its revision. Both are views of the draft itself, so they
survive restarts and need no table of their own. Every method runs through the core like a
tool call (``ToolDoor.call`` with the method's name): the same principal, rule of who may see
which draft, refusal record and audit event.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_adapter.auth import request_caller
from service.drafts.schemas import (
    DRAFT_ID_PATTERN,
    DRAFT_URI_TEMPLATE,
    draft_id_of_uri,
    draft_uri,
)
from service.errors import Category, DomainError
from service.principal import Principal
from service.tracing import trace_id_from

if TYPE_CHECKING:
    from mcp_adapter.tools import ToolDoor

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
MIME_TYPE = "application/json"
_TASK_ID = re.compile(DRAFT_ID_PATTERN.strip("^$") + r"\.r([1-9][0-9]{0,8})")
MAX_STATUS_MESSAGE = 500  # it may quote an approver's reason or an upstream's error

# Draft status -> the task's status; a draft that is still open is a task at work.
TASK_STATUS = {
    "proposed": "working",
    "approved": "working",
    "queued": "working",
    "running": "working",
    "succeeded": "completed",
    "failed": "completed",
    "rejected": "completed",
    "expired": "completed",
    "withdrawn": "cancelled",
}
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def task_id(draft_id: str, revision: int) -> str:
    return f"{draft_id}.r{revision}"


def parse_task_id(text: str) -> tuple[str, int] | None:
    """(draft_id, revision) of a task id this server made, or None (one spelling per task)."""
    match = _TASK_ID.fullmatch(text)
    return (text.split(".r", 1)[0], int(match.group(1))) if match else None


def wants_tasks(ctx: Any) -> bool:
    """The client declared the tasks extension on this very request (2026-07-28 clients
    declare capabilities per request; nothing is inferred from earlier ones)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and TASKS_EXTENSION in (capabilities.extensions or {}))


def caller(ctx: Any) -> tuple[Principal | None, str]:
    """The principal of the request's access token (None over stdio) and its trace id."""
    principal, traceparent = request_caller(ctx)
    return principal, trace_id_from(traceparent)


def tool_result(view: dict[str, Any]) -> types.CallToolResult:
    """A draft as a tool result: the JSON view, and a link to its resource."""
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text=json.dumps(view, ensure_ascii=False)),
            resource_link(view),
        ],
        structured_content=view,
    )


def resource_link(view: dict[str, Any]) -> types.ResourceLink:
    return types.ResourceLink(
        type="resource_link",
        uri=draft_uri(view["draft_id"]),
        name=view["draft_id"],
        description="This draft: read it for its current state, or subscribe to it.",
        mime_type=MIME_TYPE,
    )


def task(view: dict[str, Any], revision: int | None = None) -> dict[str, Any]:
    """The task of ``revision`` of the draft ``view`` shows (its current one by default), as
    ``tasks/get`` and ``notifications/tasks`` carry it."""
    revision = revision or view["revision"]
    status = TASK_STATUS[view["status"]]
    message = _status_message(view)
    if revision != view["revision"]:  # the agent revised it: this revision will never run
        status = "cancelled"
        message = (
            f"revision {revision} was superseded by revision {view['revision']}; follow task "
            f"{task_id(view['draft_id'], view['revision'])}"
        )
    created = datetime.fromisoformat(view["created_at"])
    expires = datetime.fromisoformat(view["expires_at"])
    answer: dict[str, Any] = {
        "taskId": task_id(view["draft_id"], revision),
        "status": status,
        "statusMessage": message,
        "createdAt": view["created_at"],
        "lastUpdatedAt": view["updated_at"],
        "ttlMs": int((expires - created).total_seconds() * 1000),
    }
    if status not in TERMINAL and view.get("poll_after_seconds"):
        answer["pollIntervalMs"] = view["poll_after_seconds"] * 1000
    if status == "completed":
        answer["result"] = tool_result(view).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
    return answer


def _status_message(view: dict[str, Any]) -> str:
    approvals = view["approvals"]
    holds = approvals["received"] >= approvals["required"]
    match view["status"]:
        case "proposed":
            missing = max(approvals["required"] - approvals["received"], 0)
            return f"waiting for {missing} of {approvals['required']} approvals"
        case "approved" if holds:
            return "approved, waiting for execution"
        case "queued" | "running":
            return "executing"
    # Ended (or approved but no longer holding): the draft's own words, which quote what a
    # person or an upstream wrote as a reason; bounded, since clients show it as a status.
    message: str = view["message"]
    if len(message) > MAX_STATUS_MESSAGE:
        message = message[: MAX_STATUS_MESSAGE - 1] + "…"
    return message


def mcp_error(error: DomainError, not_found: str) -> MCPError:
    """A refusal as a JSON-RPC error: a draft the caller may not see, or an id that names
    none, is ``not_found`` (-32602), like any unknown id; other refusals keep their code."""
    data = error.to_dict()
    if error.category in (Category.UNAVAILABLE, Category.INVALID_ARGUMENT):
        return MCPError(types.INVALID_PARAMS, not_found, data)
    if error.category is Category.TRANSIENT:  # rate limited, the database away: retry later
        return MCPError(types.INTERNAL_ERROR, error.message, data)
    return MCPError(types.INVALID_REQUEST, error.message, data)


TASK_NOT_FOUND = "Failed to retrieve task: Task not found"


def _check_name_header(ctx: Any, task_id: str) -> None:
    """Over streamable HTTP a client names the task in ``Mcp-Name`` too (the extension says
    it must; some clients do not send it): when sent, it must be the one in the body."""
    request = getattr(ctx, "request", None)
    named = request.headers.get("mcp-name") if request is not None else None
    if named is not None and named != task_id:
        raise MCPError(types.HEADER_MISMATCH, "The Mcp-Name header does not match taskId.")


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any] | None = None


class DraftMethods:
    """The handlers of ``resources/*`` and ``tasks/*`` on the low-level server."""

    def __init__(self, door: ToolDoor) -> None:
        self.door = door

    async def call(self, ctx: Any, method: str, arguments: dict[str, Any]) -> dict[str, Any]:
        principal, trace_id = caller(ctx)
        return await anyio.to_thread.run_sync(
            lambda: self.door.call(method, arguments, trace_id, principal, method=method)
        )

    # --- resources ----------------------------------------------------------------------

    async def list_resources(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        try:
            page = await self.call(ctx, "resources/list", {"cursor": cursor})
        except DomainError as error:
            raise mcp_error(error, "The cursor is not one this server returned.") from None
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=draft["resource_uri"],
                    name=draft["draft_id"],
                    title=f"{draft['action']} ({draft['status']})",
                    description=draft["summary"],
                    mime_type=MIME_TYPE,
                )
                for draft in page["drafts"]
            ],
            next_cursor=page["next_cursor"],
        )

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=DRAFT_URI_TEMPLATE,
                    name="draft",
                    title="A draft you proposed",
                    description="The current state of a draft you proposed (the same view "
                    "get_draft returns); subscribe to it to be told of every change.",
                    mime_type=MIME_TYPE,
                )
            ]
        )

    async def read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        view = await self.read(ctx, "resources/read", params.uri)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=params.uri, mime_type=MIME_TYPE, text=json.dumps(view, ensure_ascii=False)
                )
            ]
        )

    async def read(self, ctx: Any, method: str, uri: str) -> dict[str, Any]:
        """The draft ``uri`` names, as its proposer sees it; not found for anyone else."""
        draft_id = draft_id_of_uri(uri) or uri[:128]  # the core refuses (and audits) a non-id
        try:
            return await self.call(ctx, method, {"draft_id": draft_id})
        except DomainError as error:
            raise mcp_error(error, f"Resource not found: {uri[:128]}") from None

    # --- tasks --------------------------------------------------------------------------

    async def get_task(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        self.require_tasks(ctx)
        return {**task(*await self.task_view(ctx, "tasks/get", params)), "resultType": "complete"}

    async def cancel_task(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        """Withdraws the draft (an ack, as the extension says; a draft already approved is
        refused with the reason, so the agent learns it will still run)."""
        self.require_tasks(ctx)
        await self.task_view(ctx, "tasks/cancel", params)
        return {"resultType": "complete"}

    async def update_task(self, ctx: Any, params: UpdateTaskParams) -> dict[str, Any]:
        """Nothing of a proposal waits for the agent's input: an ack for the caller's own task
        (responses to requests never made are ignored, as the extension says)."""
        self.require_tasks(ctx)
        await self.task_view(ctx, "tasks/get", params)
        return {"resultType": "complete"}

    async def task_view(
        self, ctx: Any, method: str, params: TaskIdParams
    ) -> tuple[dict[str, Any], int]:
        _check_name_header(ctx, params.task_id)
        # An id this server did not make reaches the core as revision 0, which it refuses
        # (and audits) like any other invalid argument: not found.
        draft_id, revision = parse_task_id(params.task_id) or (params.task_id[:128], 0)
        arguments = {"draft_id": draft_id, "revision": revision}
        try:
            view = await self.call(ctx, method, arguments)
        except DomainError as error:
            raise mcp_error(error, TASK_NOT_FOUND) from None
        if revision > view["revision"]:  # a revision the draft never had: no such task
            raise MCPError(types.INVALID_PARAMS, TASK_NOT_FOUND)
        return view, revision

    @staticmethod
    def require_tasks(ctx: Any) -> None:
        if not wants_tasks(ctx):
            raise MCPError(
                types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
