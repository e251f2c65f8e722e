"""What a signed decision is, whatever its source: the types the progress owner counts
(``service.approvals.progress``) and each source of signed decisions brings (the stored
approvals, standing grants)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pydantic import ValidationError
from sqlmodel import Session

from service.approvals.schemas import Decision
from service.config import Settings
from service.drafts.models import Draft
from service.keys.assertions import RelyingParty
from service.keys.repository import Credential
from service.money import Money
from service.policies.schemas import PolicyConfig
from service.registry.base import WriteAction
from service.runtime import Runtime


@dataclass(frozen=True)
class Rules:
    """What counting rests on besides the stored rows: the registered write actions, the
    configured policies, and the settings (default TTL, the passkeys' relying party)."""

    writes: Mapping[str, WriteAction]
    policies: dict[str, PolicyConfig]
    settings: Settings

    @classmethod
    def of(cls, runtime: Runtime) -> Rules:
        return cls(runtime.registry.writes, runtime.policies, runtime.settings)

    def signed_amount(self, draft: Draft) -> Money | str | None:
        """The amount in the draft's signed params (never its unsigned amount columns), or
        why it cannot be read."""
        action = self.writes.get(draft.action)
        if action is None:
            return f"the action {draft.action} is not registered"
        try:
            signed = action.Input.model_validate_json(json.dumps(draft.params))
        except ValidationError:
            return "the stored params are not valid for the action"
        return action.amount_of(signed)


class Proof(Protocol):
    """What one signed decision's signature covers, and how it verifies: each source of
    signed decisions brings its own."""

    def binding_problem(self, draft: Draft, digest: str) -> str | None:
        """Why it does not cover exactly the draft's current revision (``digest``: of the
        params as stored now), or None."""

    def signature_problem(self, key: Credential, party: RelyingParty) -> str | None:
        """Why its signature does not verify with ``key``, or None."""


@dataclass(frozen=True)
class SignedDecision:
    """An approve or reject decision signed by an approver, from any source."""

    reference: str  # what a person looks it up by (an approval id, a grant id)
    approver: str
    key_id: str
    scheme: str
    decision: Decision
    reason: str | None
    issued_at: str
    # When draftgate accepted it: a key revoked before then signed nothing that counts.
    signed_at: datetime
    # The revision it was signed for (a source of decisions bound to no single revision, a
    # standing grant, names the one it covered).
    revision: int
    proof: Proof
    # The standing grant it comes from, when it is one (shown on every draft it covered).
    grant_id: str | None = None


class Source(Protocol):
    def load(
        self, session: Session, rules: Rules, drafts: Sequence[Draft], *, new: frozenset[str]
    ) -> dict[str, list[SignedDecision]]:
        """The signed decisions bearing on each draft, by draft id, in a fixed number of
        queries whatever the number of drafts. ``new``: the drafts whose current revision
        this unit of work wrote (nobody can have signed it yet)."""
