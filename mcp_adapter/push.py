"""Push instead of polling: ``subscriptions/listen`` streams of an agent's own drafts.

Approvals, executions and expiries happen in other processes (the API, the worker, beat),
so one ``DraftHub`` per MCP process learns of them the way the console's live view does:
from the audit log, which every one of those processes writes in the transaction of the
change. It reads only the tenants somebody here is listening to, a few event types after
the last seq it has seen, every ``POLL_SECONDS``; each listen stream then tells its client
about the drafts it may follow and nothing else.

What a stream may follow is decided through the core, item by item, exactly as reading the
resource or the task would be (and audited so): a draft of another tenant, agent or end
user is simply not honoured (left out of the acknowledgement), like an id that does not
exist. Before every push the stream's credential is proved again, so a revoked token or an
expired access token ends it; a push never repeats a state it could not read afresh.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.shared.exceptions import MCPError

from mcp_adapter.auth import DOOR, authenticate_for_mcp
from mcp_adapter.drafts import (
    TERMINAL,
    DraftMethods,
    TaskIdParams,
    caller,
    mcp_error,
    parse_task_id,
    task,
    wants_tasks,
)
from service.db import read_scope, unavailable
from service.drafts.schemas import draft_id_of_uri
from service.errors import DomainError, internal_error
from service.principal import Principal
from service.runtime import Runtime
from service.sessions import feed
from service.toolcalls import actions as toolcalls

logger = logging.getLogger(__name__)

# How often the hub looks for changes: the bound on how late a push can be (plus a read).
POLL_SECONDS = 0.2
MAX_FOLLOWED = 100  # resources and tasks on one stream
MAX_ID_LENGTH = 256  # a task id or URI longer than this names nothing of ours
MAX_STREAMS_PER_TOKEN = 8
MAX_STREAMS_PER_TENANT = 256
MAX_STREAMS = 1024  # in this process
MAX_STREAM_SECONDS = 3600  # then closed gracefully: the client listens again
MAX_BACKLOG = 256  # changes waiting for a stream whose client stopped reading
FAILURE_LOG_SECONDS = 30  # while the database is away, one warning per this many seconds
FINAL = frozenset({"succeeded", "failed", "rejected", "expired", "withdrawn"})


class TaskNotification(types.Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """``notifications/tasks`` (the tasks extension): a task's whole state, as tasks/get."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: dict[str, Any]


@dataclass(eq=False)
class Follower:
    """One listen stream's interest: a tenant's drafts, delivered on the stream's loop."""

    tenant: str
    draft_ids: frozenset[str]
    loop: asyncio.AbstractEventLoop
    send: Any  # anyio MemoryObjectSendStream[feed.DraftChange]
    overflowed: bool = False

    def notify(self, change: feed.DraftChange) -> None:
        """Called on the hub's thread: hand the change to the stream's own loop."""
        self.loop.call_soon_threadsafe(self._put, change)

    def _put(self, change: feed.DraftChange) -> None:
        try:
            self.send.send_nowait(change)
        except anyio.WouldBlock:  # the client stopped reading: its stream ends in an error
            self.overflowed = True
            self.send.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


@dataclass
class DraftHub:
    """The process's one reader of draft changes, running while anyone listens. Its lock is
    never held across a database read (the event loop takes it to unfollow)."""

    runtime: Runtime
    poll_seconds: float = POLL_SECONDS
    _followers: dict[str, set[Follower]] = field(default_factory=dict)
    _heads: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _last_warning: float = 0.0

    def follow(self, follower: Follower) -> Callable[[], None]:
        """Start telling ``follower`` of changes committed from now on (blocking: it reads
        the tenant's head); returns the function that stops it."""
        with read_scope(self.runtime.engine) as session:
            head = feed.tenant_head(session, follower.tenant)
        with self._lock:
            # A tenant already followed keeps its head: it has told nobody of later changes.
            self._heads.setdefault(follower.tenant, head)
            self._followers.setdefault(follower.tenant, set()).add(follower)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="draft-hub", daemon=True)
                self._thread.start()

        def unfollow() -> None:
            with self._lock:
                followers = self._followers.get(follower.tenant, set())
                followers.discard(follower)
                if not followers:  # a later listener starts from the head of its time
                    self._followers.pop(follower.tenant, None)
                    self._heads.pop(follower.tenant, None)

        return unfollow

    def _run(self) -> None:
        while True:
            with self._lock:
                tenants = {tenant: self._heads[tenant] for tenant in self._followers}
                if not tenants:
                    self._thread = None
                    return
            try:
                self._poll(tenants)
            except Exception:  # the database is away: look again next time
                if time.monotonic() - self._last_warning > FAILURE_LOG_SECONDS:
                    self._last_warning = time.monotonic()
                    logger.warning("draft hub: reading changes failed", exc_info=True)
            time.sleep(self.poll_seconds)

    def _poll(self, tenants: dict[str, int]) -> None:
        with read_scope(self.runtime.engine) as session:
            found = {
                tenant: feed.changes_after(session, tenant, after_seq=head)
                for tenant, head in tenants.items()
            }
        for tenant, (changes, new_head) in found.items():
            with self._lock:
                if self._heads.get(tenant) != tenants[tenant]:  # left (or restarted) meanwhile
                    continue
                self._heads[tenant] = new_head
                followers = list(self._followers.get(tenant, ()))
            for change in changes:
                for follower in followers:
                    if change.draft_id in follower.draft_ids:
                        follower.notify(change)


@dataclass(frozen=True)
class Credential:
    """What the stream's caller proved when it opened it, to prove again before each push."""

    runtime: Runtime
    secret: str | None
    door: str
    trace_id: str

    def prove(self) -> Principal:
        """The principal, still; DomainError (audited) once the token is revoked or expired."""
        return authenticate_for_mcp(
            self.runtime, self.secret, trace_id=self.trace_id, door=self.door, source="listen"
        )


@dataclass
class ListenDoor:
    """Serves ``subscriptions/listen`` for the drafts of the calling agent."""

    methods: DraftMethods
    hub: DraftHub
    _streams: dict[str, int] = field(default_factory=dict)  # token id -> open streams
    _tenants: dict[str, int] = field(default_factory=dict)  # tenant -> open streams

    async def __call__(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        wanted = params.notifications
        uris = _ids(wanted.resource_subscriptions or [], "resourceSubscriptions")
        task_ids = _ids((wanted.model_extra or {}).get("taskIds") or [], "taskIds")
        if task_ids and not wants_tasks(ctx):
            DraftMethods.require_tasks(ctx)
        if len(uris) + len(task_ids) > MAX_FOLLOWED:
            raise MCPError(
                types.INVALID_PARAMS,
                f"At most {MAX_FOLLOWED} resources and tasks can be followed on one stream.",
            )
        credential = self._credential(ctx)
        principal = await _run(credential.prove)
        limited = self.methods.door.over_limit(principal)  # a listen costs like a call
        if limited is not None:
            raise mcp_error(limited, limited.message)
        self._open(principal)
        try:
            with anyio.move_on_after(MAX_STREAM_SECONDS):
                await self._serve(ctx, principal.tenant, credential, uris, task_ids)
        finally:
            self._close(principal)
        return types.SubscriptionsListenResult(_meta={SUBSCRIPTION_ID_META_KEY: ctx.request_id})

    def _credential(self, ctx: Any) -> Credential:
        """Over HTTP the bearer secret of the listen request itself (its headers live as long
        as the stream does); over stdio the configured token."""
        _, trace_id = caller(ctx)
        door = self.methods.door
        if get_access_token() is not None:
            _, _, secret = ctx.request.headers.get("authorization", "").partition(" ")
            return Credential(door.runtime, secret.strip() or None, DOOR, trace_id)
        return Credential(door.runtime, door.stdio_token, f"{DOOR}-stdio", trace_id)

    def _open(self, principal: Principal) -> None:
        if sum(self._streams.values()) >= MAX_STREAMS:
            raise MCPError(types.INVALID_REQUEST, "Too many subscriptions on this server now.")
        if self._tenants.get(principal.tenant, 0) >= MAX_STREAMS_PER_TENANT:
            raise MCPError(types.INVALID_REQUEST, "Too many subscriptions for this tenant now.")
        if self._streams.get(principal.token_id, 0) >= MAX_STREAMS_PER_TOKEN:
            raise MCPError(
                types.INVALID_REQUEST,
                f"At most {MAX_STREAMS_PER_TOKEN} subscriptions per token at once: close one "
                "(or follow several drafts on one stream).",
            )
        _count(self._streams, principal.token_id, +1)
        _count(self._tenants, principal.tenant, +1)

    def _close(self, principal: Principal) -> None:
        _count(self._streams, principal.token_id, -1)
        _count(self._tenants, principal.tenant, -1)

    async def _serve(
        self, ctx: Any, tenant: str, credential: Credential, uris: list[str], task_ids: list[str]
    ) -> None:
        named = {draft_id_of_uri(uri) for uri in uris}
        named |= {parsed[0] for t in task_ids if (parsed := parse_task_id(t))}
        send, changes = anyio.create_memory_object_stream[feed.DraftChange](MAX_BACKLOG)
        follower = Follower(
            tenant, frozenset(d for d in named if d), asyncio.get_running_loop(), send
        )
        stream = _Stream(ctx, self.methods, credential)
        # Following starts before anything is read, so no change between the reads below
        # and the first poll is missed; a stream that names nothing of ours follows nothing.
        unfollow = await _run(self.hub.follow, follower) if follower.draft_ids else None
        try:
            await stream.honour(uris, task_ids)
            await stream.acknowledge()
            await stream.send_tasks(list(stream.tasks))  # where each task stands now
            if not stream.done:
                async for change in changes:
                    await stream.tell(change)
                    if stream.done:  # all it follows has ended: close it gracefully
                        break
            if follower.overflowed:
                raise MCPError(
                    types.INTERNAL_ERROR,
                    f"The stream fell {MAX_BACKLOG} changes behind and was ended: listen "
                    "again and read the drafts anew.",
                )
        finally:
            if unfollow is not None:
                unfollow()
            send.close()
            changes.close()


def _ids(values: Any, name: str) -> list[str]:
    """A filter's list of ids, each once: strings of a bounded length, or INVALID_PARAMS."""
    if not isinstance(values, list) or not all(
        isinstance(value, str) and len(value) <= MAX_ID_LENGTH for value in values
    ):
        raise MCPError(
            types.INVALID_PARAMS,
            f"{name} must be a list of strings of at most {MAX_ID_LENGTH} characters.",
        )
    return list(dict.fromkeys(values))


def _count(counts: dict[str, int], key: str, step: int) -> None:
    counts[key] = counts.get(key, 0) + step
    if counts[key] <= 0:
        del counts[key]


async def _run(work: Callable[..., Any], *args: Any) -> Any:
    """Blocking work off the loop; a refusal or an outage as a JSON-RPC error, never -32603
    for a caller's mistake."""
    try:
        return await anyio.to_thread.run_sync(work, *args)
    except DomainError as error:
        raise mcp_error(error, error.message) from None
    except Exception as exc:
        failure = unavailable(exc) or internal_error()
        logger.warning("listen: %s", failure.code, exc_info=True)
        raise mcp_error(failure, failure.message) from exc


@dataclass
class _Stream:
    """One listen stream: what it honours, and the frames it sends."""

    ctx: Any
    methods: DraftMethods
    credential: Credential
    resources: dict[str, str] = field(default_factory=dict)  # uri -> draft id
    tasks: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)

    @property
    def meta(self) -> dict[str, Any]:
        return {SUBSCRIPTION_ID_META_KEY: self.ctx.request_id}

    @property
    def done(self) -> bool:
        """Nothing it follows can change any more."""
        return not self.resources and not self.tasks

    async def honour(self, uris: list[str], task_ids: list[str]) -> None:
        """What of it the caller may follow, each read through the core (and audited)."""
        for uri in uris:
            try:
                view = await self.methods.read(self.ctx, "resources/read", uri)
            except MCPError:
                continue  # not the caller's, or no draft: not honoured
            if view["status"] not in FINAL:
                self.resources[uri] = view["draft_id"]
        for task_id in task_ids:
            try:
                view, revision = await self.methods.task_view(
                    self.ctx, "tasks/get", TaskIdParams(task_id=task_id)
                )
            except MCPError:
                continue
            self.tasks[task_id] = (revision, view)

    async def acknowledge(self) -> None:
        honoured = types.SubscriptionFilter(
            resource_subscriptions=list(self.resources) or None,
            **({"taskIds": list(self.tasks)} if self.tasks else {}),
        )
        await self._send(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=honoured, _meta=self.meta
                )
            )
        )

    async def tell(self, change: feed.DraftChange) -> None:
        """Push one change to what follows its draft, as the caller may still see it."""
        uris = [uri for uri, draft_id in self.resources.items() if draft_id == change.draft_id]
        followed = [t for t, (_, view) in self.tasks.items() if view["draft_id"] == change.draft_id]
        if not uris and not followed:
            return
        principal = await _run(self.credential.prove)
        for uri in uris:
            await self._send(
                types.ResourceUpdatedNotification(
                    params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=self.meta)
                )
            )
            if change.status in FINAL:
                del self.resources[uri]
        if followed:
            runtime = self.credential.runtime
            view = await _run(toolcalls.followed_draft, runtime, principal, change.draft_id)
            for task_id in followed:
                self.tasks[task_id] = (self.tasks[task_id][0], view)
            await self.send_tasks(followed)

    async def send_tasks(self, task_ids: list[str]) -> None:
        for task_id in task_ids:
            revision, view = self.tasks[task_id]
            state = task(view, revision)
            await self._send(TaskNotification(params={**state, "_meta": self.meta}))
            if state["status"] in TERMINAL:
                del self.tasks[task_id]

    async def _send(self, notification: Any) -> None:
        await self.ctx.session.send_notification(
            notification, related_request_id=self.ctx.request_id
        )
