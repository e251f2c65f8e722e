"""What an action is (DESIGN.md §2).

A concrete action subclasses ``ReadAction`` or ``WriteAction`` AND declares
``kind`` itself; the base classes deliberately have no default, so the
registry can refuse any action whose kind was not written down.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from service.canonical import canonical_json, sha256_hex
from service.config import Settings
from service.masking import masked_dump
from service.money import AmountView, Money
from service.principal import Principal
from service.validation import StrictInput


@dataclass(frozen=True)
class ActionContext:
    """What an action may use: the unit of work, the caller, the settings, the moment."""

    session: Session
    principal: Principal
    settings: Settings
    now: datetime
    trace_id: str | None = None
    attempt: int = 1  # which execution attempt this is (1 outside execution)


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Preview(BaseModel):
    """What ``validate`` learns: the summary an approver signs over, the money, the risk."""

    model_config = ConfigDict(frozen=True)

    summary: str = Field(description="One or two sentences an approver reads; no raw PII.")
    amount: Money | None = None
    risk: Risk = Risk.MEDIUM


class SourceFact(BaseModel):
    """One fact about a source an approver reads beside the change (label: value)."""

    model_config = ConfigDict(frozen=True)

    label: str
    value: str


def source_name(ref: str) -> str:
    """How a source's ``ref`` reads in a sentence: ``order:ORD-1004`` is ``ORD-1004``."""
    return ref.split(":", 1)[-1]


def digest_revision(state: Any) -> str:
    """A source revision that is a digest of the state's JSON (RFC 8785, SHA-256, 128 bits):
    any change of it, by anyone, moves the revision."""
    return sha256_hex(canonical_json(state))[:32]


class SourceState(BaseModel):
    """The record a write changes, as it stands: which one (``ref``), its version
    (``revision``, opaque: equal revisions mean the approver saw this very state) and the
    facts shown to the approver. Approvals bind the revision (docs/approvals.md)."""

    model_config = ConfigDict(frozen=True)

    ref: str
    revision: str = Field(pattern=r"^[A-Za-z0-9._:@+=/-]{1,128}$")
    facts: tuple[SourceFact, ...] = ()
    # The most the source allows changes of it to move in total now (a refund: what is still
    # refundable), so approvers are warned when open drafts on it add up to more.
    limit: AmountView | None = None

    def recorded(self) -> list[dict[str, str]]:
        """The facts as a draft stores them."""
        return [fact.model_dump() for fact in self.facts]

    def changes_from(self, facts: list[dict[str, str]] | None) -> list[dict[str, str]]:
        """Each fact whose value differs from ``facts`` (as recorded): label, then, now."""
        then = {fact["label"]: fact["value"] for fact in facts or []}
        return [
            {"label": fact.label, "then": then.get(fact.label, ""), "now": fact.value}
            for fact in self.facts
            if then.get(fact.label) != fact.value
        ]


class Outcome(BaseModel):
    """What ``execute`` did, in words for the agent and data for the record."""

    model_config = ConfigDict(frozen=True)

    summary: str
    data: dict[str, Any] = Field(default_factory=dict)


class Action(ABC):
    """Common declaration of every action."""

    name: ClassVar[str]
    kind: ClassVar[str]  # "read" or "write"; no default on purpose
    contract_version: ClassVar[int]
    title: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[StrictInput]]

    def masked(self, params: BaseModel) -> dict[str, Any]:
        """The arguments as they may appear in tool output and audit data."""
        return masked_dump(params)


class ReadAction(Action):
    Output: ClassVar[type[BaseModel]]
    # True when answering asks a system outside draftgate's database (a carrier, an upstream
    # server): published as the tool's openWorldHint.
    open_world: ClassVar[bool] = False

    @abstractmethod
    def handle(self, ctx: ActionContext, params: Any) -> BaseModel:
        """Answer the read. Must not change any state."""


class WriteAction(Action):
    # Whether ``applied`` knows for sure if a change was made (the shop: its own rows). An
    # upstream behind the gateway cannot be asked: only a repeat with the same key tells.
    knows_applied: ClassVar[bool] = True

    def amount_of(self, params: Any) -> Money | None:
        """The money a change moves, read from the params approvers sign (for policies).

        By default the ``amount`` field when it is Money; override for other shapes.
        """
        amount = getattr(params, "amount", None)
        return amount if isinstance(amount, Money) else None

    # Optional effects an approver may drop when narrowing a draft (issue 21.3), e.g. "also
    # notify the customer"; none unless an action declares them.
    droppable: ClassVar[frozenset[str]] = frozenset()

    def narrowing_problem(self, before: Any, after: Any) -> str | None:
        """Why the params ``after`` do not narrow ``before`` (both the action's validated
        Input), or None: only ``amount.amount_minor`` lowered (the currency and everything
        else unchanged), and dropping what the action declares ``droppable``; anything else,
        and nothing at all, is not narrowing.

        Only for the default money shape (an ``amount`` field holding ``Money``): an action
        whose money lives elsewhere (``amount_of`` overridden, the gateway's) overrides this
        too, else its drafts cannot be narrowed (fail closed: which leaf is "the amount" is
        the action's to say, and a guess could let a field beside it change)."""
        if type(self).amount_of is not WriteAction.amount_of:
            return "this action's drafts cannot be narrowed (its amount is not its amount field)"
        old, new = self.amount_of(before), self.amount_of(after)
        if (old is None) != (new is None):
            return "the amount may be lowered, not added or removed"
        was = before.model_dump(mode="json", exclude_none=True)
        now = after.model_dump(mode="json", exclude_none=True)
        if now == was:
            return "nothing was narrowed"
        if old is not None and new is not None:
            if new.currency != old.currency:
                return f"the currency must stay {old.currency}"
            if new.amount_minor > old.amount_minor:
                return f"{new.render()} is more than the {old.render()} proposed"
            # The lowered number is the one change allowed: put it back, and compare the rest.
            now = {**now, "amount": {**now["amount"], "amount_minor": old.amount_minor}}
        changed = sorted(
            name
            for name in set(was) | set(now)
            if was.get(name) != now.get(name) and not (name in self.droppable and name not in now)
        )
        if changed:
            return (
                "only the amount may be lowered"
                + (f" or {', '.join(sorted(self.droppable))} dropped" if self.droppable else "")
                + f"; changed: {', '.join(changed)}"
            )
        return None

    @property
    def declares_source(self) -> bool:
        """Whether this action binds its drafts to a source (it overrides ``source``): read
        from the code, never from a draft row someone could have changed."""
        return type(self).source is not WriteAction.source

    def source(self, ctx: ActionContext, params: Any, *, lock: bool = False) -> SourceState | None:
        """The record this change would change, as it stands now, or None (no source).

        ``lock``: the worker holds the record's lock from here until its change commits, so
        nothing moves it between this comparison and the change."""
        return None

    @abstractmethod
    def validate(self, ctx: ActionContext, params: Any) -> Preview:
        """Check the business rules against current state and describe the change."""

    @abstractmethod
    def applied(self, ctx: ActionContext, idempotency_key: str) -> Outcome | None:
        """The outcome if a change with this idempotency key was already made downstream.

        The worker asks first, so a redelivered execution whose change already
        happened records it instead of validating against the changed world.
        """

    @abstractmethod
    def execute(self, ctx: ActionContext, params: Any, idempotency_key: str) -> Outcome:
        """Make the change, exactly once per idempotency key. Only the worker calls this."""
