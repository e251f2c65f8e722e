"""Push instead of polling: ``subscriptions/listen`` streams of an agent's own drafts.

Approvals, executions and expiries happen in other processes (the API, the worker, beat),
so one ``DraftHub`` per MCP process learns of them the way the console's live view does:
from the audit log, which every one of those processes writes in the transaction of the
change. It reads only the tenants somebody here is listening to, a few event types after
the last seq it has seen, every ``POLL_SECONDS``; each listen stream then tells its client
about the drafts it may follow and nothing else.

What a stream may follow is decided through the core, item by item, exactly as reading the
resource or the task would be: a draft of another tenant, agent or end user is simply not
honoured (left out of the acknowledgement), like an id that does not exist.
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
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.shared.exceptions import MCPError

from mcp_adapter.drafts import (
    TERMINAL,
    DraftMethods,
    TaskIdParams,
    caller,
    parse_task_id,
    task,
    wants_tasks,
)
from service.db import read_scope
from service.drafts.schemas import draft_id_of_uri
from service.runtime import Runtime
from service.sessions import feed

logger = logging.getLogger(__name__)

# How often the hub looks for changes: the bound on how late a push can be (plus a read).
POLL_SECONDS = 0.2
MAX_FOLLOWED = 100  # resources and tasks on one stream
MAX_STREAMS_PER_TOKEN = 8
MAX_STREAMS = 1024  # in this process
MAX_BACKLOG = 256  # changes waiting for a stream whose client stopped reading
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

    def notify(self, change: feed.DraftChange) -> None:
        """Called on the hub's thread: hand the change to the stream's own loop."""
        self.loop.call_soon_threadsafe(self._put, change)

    def _put(self, change: feed.DraftChange) -> None:
        try:
            self.send.send_nowait(change)
        except anyio.WouldBlock:  # the client stopped reading: end its stream
            logger.warning("listen stream backlog full; ending it")
            self.send.close()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass


@dataclass
class DraftHub:
    """The process's one reader of draft changes, running while anyone listens."""

    runtime: Runtime
    poll_seconds: float = POLL_SECONDS
    _followers: dict[str, set[Follower]] = field(default_factory=dict)
    _heads: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def follow(self, follower: Follower) -> Callable[[], None]:
        """Start telling ``follower`` of changes committed from now on (blocking: it may read
        the tenant's head); returns the function that stops it."""
        with self._lock:
            if follower.tenant not in self._heads:
                with read_scope(self.runtime.engine) as session:
                    self._heads[follower.tenant] = feed.tenant_head(session, follower.tenant)
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
                logger.warning("draft hub: reading changes failed", exc_info=True)
            time.sleep(self.poll_seconds)

    def _poll(self, tenants: dict[str, int]) -> None:
        with read_scope(self.runtime.engine) as session:
            for tenant, head in tenants.items():
                changes, new_head = feed.changes_after(session, tenant, after_seq=head)
                with self._lock:
                    if tenant not in self._heads:  # its last listener left meanwhile
                        continue
                    self._heads[tenant] = new_head
                    followers = list(self._followers.get(tenant, ()))
                for change in changes:
                    for follower in followers:
                        if change.draft_id in follower.draft_ids:
                            follower.notify(change)


@dataclass
class ListenDoor:
    """Serves ``subscriptions/listen`` for the drafts of the calling agent."""

    methods: DraftMethods
    hub: DraftHub
    _streams: dict[str, int] = field(default_factory=dict)  # token id -> open streams

    async def __call__(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        wanted = params.notifications
        uris = list(dict.fromkeys(wanted.resource_subscriptions or []))
        task_ids = [str(t) for t in dict.fromkeys((wanted.model_extra or {}).get("taskIds") or [])]
        if task_ids and not wants_tasks(ctx):
            DraftMethods.require_tasks(ctx)
        if len(uris) + len(task_ids) > MAX_FOLLOWED:
            raise MCPError(
                types.INVALID_PARAMS,
                f"At most {MAX_FOLLOWED} resources and tasks can be followed on one stream.",
            )
        principal, trace_id = caller(ctx)
        principal = await anyio.to_thread.run_sync(self.methods.door.principal, principal, trace_id)
        self._open(principal.token_id)
        try:
            return await self._serve(ctx, principal.tenant, uris, task_ids)
        finally:
            self._streams[principal.token_id] -= 1
            if not self._streams[principal.token_id]:
                del self._streams[principal.token_id]

    def _open(self, token_id: str) -> None:
        if sum(self._streams.values()) >= MAX_STREAMS:
            raise MCPError(types.INVALID_REQUEST, "Too many subscriptions on this server now.")
        if self._streams.get(token_id, 0) >= MAX_STREAMS_PER_TOKEN:
            raise MCPError(
                types.INVALID_REQUEST,
                f"At most {MAX_STREAMS_PER_TOKEN} subscriptions per token at once: close one "
                "(or follow several drafts on one stream).",
            )
        self._streams[token_id] = self._streams.get(token_id, 0) + 1

    async def _serve(
        self, ctx: Any, tenant: str, uris: list[str], task_ids: list[str]
    ) -> types.SubscriptionsListenResult:
        meta = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        named = {draft_id_of_uri(uri) for uri in uris}
        named |= {parsed[0] for t in task_ids if (parsed := parse_task_id(t))}
        send, changes = anyio.create_memory_object_stream[feed.DraftChange](MAX_BACKLOG)
        follower = Follower(
            tenant, frozenset(d for d in named if d), asyncio.get_running_loop(), send
        )
        # Following starts before anything is read, so no change between the reads below
        # and the first poll is missed.
        unfollow = await anyio.to_thread.run_sync(self.hub.follow, follower)
        try:
            stream = _Stream(ctx, meta, self.methods)
            await stream.honour(uris, task_ids)
            await stream.acknowledge()
            await stream.send_tasks(stream.tasks)  # where each task stands now
            if not stream.done:
                async for change in changes:
                    await stream.tell(change)
                    if stream.done:  # all it follows has ended: close it gracefully
                        break
        finally:
            unfollow()
            send.close()
            changes.close()
        return types.SubscriptionsListenResult(_meta=meta)


@dataclass
class _Stream:
    """One listen stream: what it honours, and the frames it sends."""

    ctx: Any
    meta: dict[str, Any]
    methods: DraftMethods
    resources: dict[str, str] = field(default_factory=dict)  # uri -> draft id
    tasks: dict[str, tuple[str, int, dict[str, Any]]] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        """Nothing it follows can change any more."""
        return not self.resources and not self.tasks

    async def honour(self, uris: list[str], task_ids: list[str]) -> None:
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
            self.tasks[task_id] = (view["draft_id"], revision, view)

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
        for uri, draft_id in list(self.resources.items()):
            if draft_id == change.draft_id:
                await self._send(
                    types.ResourceUpdatedNotification(
                        params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=self.meta)
                    )
                )
                if change.status in FINAL:
                    del self.resources[uri]
        followed = {t: v for t, v in self.tasks.items() if v[0] == change.draft_id}
        for task_id in followed:
            try:
                view, revision = await self.methods.task_view(
                    self.ctx, "tasks/get", TaskIdParams(task_id=task_id)
                )
            except MCPError:
                continue
            self.tasks[task_id] = (view["draft_id"], revision, view)
        await self.send_tasks(followed)

    async def send_tasks(self, tasks: dict[str, tuple[str, int, dict[str, Any]]]) -> None:
        for task_id in list(tasks):
            _, revision, view = self.tasks[task_id]
            state = task(view, revision)
            await self._send(TaskNotification(params={**state, "_meta": self.meta}))
            if state["status"] in TERMINAL:
                del self.tasks[task_id]

    async def _send(self, notification: Any) -> None:
        await self.ctx.session.send_notification(
            notification, related_request_id=self.ctx.request_id
        )
