"""One agent tool call, start to finish, and what is recorded of a call that was refused."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlmodel import Session

from service.audit import actions as audit
from service.audit.refusals import Refusal
from service.db import read_scope, run_read, run_unit, session_scope
from service.drafts import actions as drafts
from service.drafts.schemas import AgentDraftView
from service.errors import DomainError
from service.principal import Principal, Role
from service.registry.base import ActionContext
from service.registry.loader import ActionRegistry, exposed_name
from service.runtime import Runtime
from service.sql import utcnow
from service.toolcalls import errors
from service.toolcalls.schemas import (
    CONTROL_FIELDS,
    DraftPageInput,
    DraftRef,
    GetDraftInput,
    ToolKind,
    ToolSpec,
    control_arguments,
    propose_input_model,
)
from service.validation import StrictInput, check_bounds, parse

GET_DRAFT_DESCRIPTION = (
    "Returns the current state of a draft you proposed: proposed (waiting for human approval, "
    "with approvals so far), approved (waiting for an approver to start its execution), "
    "queued or running, succeeded (with the outcome), failed (with the reason), rejected by a "
    "human (with their reason), expired, or withdrawn. message says what to tell the user; "
    "next_action says what to do next. While it is open, wait poll_after_seconds between "
    "calls, or subscribe to its resource_uri (draftgate://drafts/<draft_id>) to be told of "
    "every change."
)

# The server's instructions are dropped by most agent frameworks, so what a model must know
# to use a propose_* tool rides on every one of them.
PROPOSAL_NOTE = (
    "This only PROPOSES the change: it records a draft that a human must approve (and start) "
    "before anything happens. Tell the user it is waiting for approval; the result's message "
    "(called as a task: its statusMessage) says what to relay. Errors are JSON objects with "
    "code, message, retryable and suggested_action: follow suggested_action."
)


def catalog(registry: ActionRegistry) -> list[ToolSpec]:
    """Every tool an agent can call, generated from the registry; writes only as propose_*."""
    return list(_catalog(registry).values())


@cache
def _catalog(registry: ActionRegistry) -> dict[str, ToolSpec]:
    tools: list[ToolSpec] = [
        ToolSpec(
            name=action.name,
            title=action.title,
            description=action.description,
            kind=ToolKind.READ,
            action=action.name,
            input_model=action.Input,
            output_model=action.Output,
            read_only=True,
            destructive=False,
            idempotent=True,
            open_world=action.open_world,
        )
        for action in registry.reads.values()
    ]
    tools += [
        ToolSpec(
            name=exposed_name(action),
            title=action.title,
            description=f"{action.description} {PROPOSAL_NOTE}",
            kind=ToolKind.PROPOSE,
            action=action.name,
            input_model=propose_input_model(action.name, action.Input),
            output_model=AgentDraftView,
            # Proposing records a draft; it changes nothing in the business system.
            read_only=False,
            destructive=False,
            idempotent=True,
            open_world=False,
        )
        for action in registry.writes.values()
    ]
    tools.append(
        ToolSpec(
            name="get_draft",
            title="Check a draft's status",
            description=GET_DRAFT_DESCRIPTION,
            kind=ToolKind.DRAFT_STATUS,
            action=None,
            input_model=GetDraftInput,
            output_model=AgentDraftView,
            read_only=True,
            destructive=False,
            idempotent=True,
            open_world=False,
        )
    )
    return {tool.name: tool for tool in tools}


def _method(name: str, kind: ToolKind, input_model: type[StrictInput], read_only: bool) -> ToolSpec:
    return ToolSpec(
        name=name,
        title=name,
        description="",
        kind=kind,
        action=None,
        input_model=input_model,
        output_model=AgentDraftView,
        read_only=read_only,
        destructive=False,
        idempotent=True,
        open_world=False,
    )


# What an agent does with its own drafts besides tools/call, by the MCP method that asks:
# never in the tool catalogue, so no tools/call name reaches them.
METHODS: dict[str, ToolSpec] = {
    "resources/read": _method("resources/read", ToolKind.DRAFT_STATUS, DraftRef, True),
    "resources/list": _method("resources/list", ToolKind.DRAFT_LIST, DraftPageInput, True),
    "tasks/get": _method("tasks/get", ToolKind.DRAFT_STATUS, DraftRef, True),
    "tasks/cancel": _method("tasks/cancel", ToolKind.WITHDRAW, DraftRef, False),
}
DRAFT_PAGE_SIZE = 50


def call_tool(
    runtime: Runtime,
    principal: Principal,
    *,
    name: str,
    arguments: dict[str, Any],
    trace_id: str | None,
    on_refusal: Callable[[Session, DomainError], None],
    method: str = "tools/call",
) -> dict[str, Any]:
    """Run one tool call for an agent and audit it; returns the structured result.

    Raises DomainError for every refusal, after ``on_refusal`` recorded it in a transaction
    of its own (the call's own work is rolled back). A read changes nothing: it runs in a
    read-only snapshot that holds no write lock, and its event is appended right after, in a
    short transaction of its own; the answer is returned only once that has committed. A
    proposal and its event are one unit of work.
    """
    started = time.perf_counter()
    spec = _catalog(runtime.registry).get(name) if method == "tools/call" else METHODS.get(method)

    def answer(session: Session) -> _Answer:
        principal.require(Role.AGENT)
        if spec is None:
            raise errors.unknown_tool(name)
        check_bounds(
            arguments,
            max_bytes=runtime.settings.max_argument_bytes,
            max_depth=runtime.settings.max_argument_depth,
        )
        params = parse(spec.input_model, arguments)
        ctx = ActionContext(
            session=session,
            principal=principal,
            settings=runtime.settings,
            now=utcnow(),
            trace_id=trace_id,
        )
        return _HANDLERS[spec.kind](ctx, runtime, spec, params)

    def audited(session: Session, answer: _Answer) -> dict[str, Any]:
        _record_call(
            session, principal, spec, answer, name=name, trace_id=trace_id, started=started
        )
        return answer.result

    engine = runtime.engine
    if spec is not None and spec.read_only:
        read = run_read(engine, answer, on_refusal=on_refusal)
        with session_scope(engine) as session:
            return audited(session, read)
    return run_unit(
        engine, lambda session: audited(session, answer(session)), on_refusal=on_refusal
    )


def followed_draft(runtime: Runtime, principal: Principal, draft_id: str) -> dict[str, Any]:
    """A draft as ``get_draft`` shows it, re-read to push a change to a stream its proposer
    opened: the same rule of who sees which draft, in a read-only snapshot, and not audited
    as a call (the agent asked nothing; opening the stream was audited). Raises DomainError."""

    def answer(session: Session) -> dict[str, Any]:
        ctx = ActionContext(
            session=session, principal=principal, settings=runtime.settings, now=utcnow()
        )
        view = drafts.get_for_agent(
            ctx, runtime.registry.writes, draft_id, policies=runtime.policies
        )
        return view.model_dump(mode="json")

    with read_scope(runtime.engine) as session:
        return answer(session)


def _record_call(
    session: Session,
    principal: Principal,
    spec: ToolSpec | None,
    answer: _Answer,
    *,
    name: str,
    trace_id: str | None,
    started: float,
) -> None:
    data: dict[str, Any] = {"tool": name, "arguments": answer.masked_arguments, "outcome": "ok"}
    # The end user the agent acted for: what ties its calls of one conversation together
    # when their trace ids differ (sessions.auditing: the draft's timeline).
    data["on_behalf_of"] = principal.on_behalf_of
    if spec is not None and spec.kind is ToolKind.PROPOSE:
        data["replayed"] = answer.result["replayed"]
    data["latency_us"] = int((time.perf_counter() - started) * 1_000_000)
    audit.record(
        session,
        tenant=principal.tenant,
        actor=principal.actor,
        type="tool.called",
        draft_id=answer.draft_id,
        trace_id=trace_id,
        data=data,
    )


@dataclass(frozen=True)
class _Answer:
    result: dict[str, Any]
    masked_arguments: dict[str, Any]
    draft_id: str | None = None


def _read(ctx: ActionContext, runtime: Runtime, spec: ToolSpec, params: StrictInput) -> _Answer:
    read = runtime.registry.reads[spec.name]
    # A read handler is anyone's code: it runs in a read-only transaction (call_tool), and a
    # write it only staged in the session fails here, inside it.
    result = read.handle(ctx, params).model_dump(mode="json")
    ctx.session.flush()
    return _Answer(result, read.masked(params))


def _propose(ctx: ActionContext, runtime: Runtime, spec: ToolSpec, params: StrictInput) -> _Answer:
    assert spec.action is not None
    write = runtime.registry.writes[spec.action]
    control = control_arguments(params)
    action_params = write.Input.model_validate_json(
        params.model_dump_json(exclude=set(CONTROL_FIELDS), exclude_none=True)
    )
    view = drafts.propose(ctx, write, action_params, policies=runtime.policies, **control)
    return _Answer(
        view.model_dump(mode="json"), {**write.masked(action_params), **control}, view.draft_id
    )


def _draft_status(
    ctx: ActionContext, runtime: Runtime, spec: ToolSpec, params: StrictInput
) -> _Answer:
    assert isinstance(params, GetDraftInput | DraftRef)
    view = drafts.get_for_agent(
        ctx, runtime.registry.writes, params.draft_id, policies=runtime.policies
    )
    return _Answer(view.model_dump(mode="json"), params.model_dump(), params.draft_id)


def _withdraw(ctx: ActionContext, runtime: Runtime, spec: ToolSpec, params: StrictInput) -> _Answer:
    assert isinstance(params, DraftRef)
    view = drafts.withdraw(
        ctx,
        runtime.registry.writes,
        params.draft_id,
        revision=params.revision,
        policies=runtime.policies,
    )
    return _Answer(view.model_dump(mode="json"), params.model_dump(), params.draft_id)


def _draft_list(
    ctx: ActionContext, runtime: Runtime, spec: ToolSpec, params: StrictInput
) -> _Answer:
    assert isinstance(params, DraftPageInput)
    page = drafts.unfinished_for_agent(
        ctx, runtime.cursors, cursor=params.cursor, limit=DRAFT_PAGE_SIZE
    )
    return _Answer(page.model_dump(mode="json"), {"cursor": params.cursor is not None})


_HANDLERS = {
    ToolKind.READ: _read,
    ToolKind.PROPOSE: _propose,
    ToolKind.DRAFT_STATUS: _draft_status,
    ToolKind.DRAFT_LIST: _draft_list,
    ToolKind.WITHDRAW: _withdraw,
}


def refused_call(
    principal: Principal,
    error: DomainError,
    *,
    name: str,
    arguments: Any,
    latency_us: int,
    trace_id: str | None,
) -> Refusal:
    """A refused tool call, as ``tool.refused`` records it. Its values may be invalid or
    hostile, so only the argument names are kept, never the values."""
    argument_names = sorted(str(key) for key in arguments) if isinstance(arguments, dict) else []
    context = {
        "tool": name,
        "argument_names": argument_names,
        "outcome": "refused",
        "latency_us": latency_us,
        "on_behalf_of": principal.on_behalf_of,
    }
    return Refusal.by(principal, "tool", error, trace_id=trace_id, context=context)
