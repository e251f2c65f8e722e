"""The signed statement (DESIGN.md §4) and how approvals are shown."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.canonical import canonical_json, sha256_hex
from service.money import AmountView
from service.signing import sign
from service.validation import SignedText, StrictInput

STATEMENT_TYPE = "draftgate.approval.v1"
# How an approval's signature signs its statement (docs/approvals.md).
SCHEME_ED25519 = "ed25519"
SCHEME_WEBAUTHN = "webauthn"
ISSUED_AT_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$"


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class SignedStatement(StrictInput):
    """A JSON object an approver signs: JCS(statement) are the signed bytes, so it says
    exactly what it says (an approval's, a standing grant's)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_omitted(cls, data: Any) -> Any:
        # Overrides StrictInput's: JCS spells a null member, so a null is refused, not dropped.
        if isinstance(data, dict):
            nulls = sorted(str(key) for key, value in data.items() if value is None)
            if nulls:
                raise ValueError(f"null is not a value of a signed statement: {', '.join(nulls)}")
        return data

    def signed_value(self) -> dict[str, Any]:
        """The JSON value whose JCS encoding is signed (absent members stay absent)."""
        return self.model_dump(mode="json", exclude_none=True)


def moment(value: str) -> datetime:
    """A signed statement's moment (ISSUED_AT_PATTERN: RFC 3339 UTC with "Z")."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def real_moment(value: str) -> str:
    """``value`` (matching ISSUED_AT_PATTERN), if it names a real moment in time."""
    try:
        moment(value)
    except ValueError:
        raise ValueError(f"{value} is not a real moment in time") from None
    return value


class ApprovalStatement(SignedStatement):
    """Exactly the JSON object an approver signs; JCS(statement) are the signed bytes."""

    type: Literal["draftgate.approval.v1"]
    tenant: str = Field(min_length=1, max_length=64)
    draft_id: str = Field(pattern=r"^dft_[0-9a-f]{32}$")
    revision: int = Field(ge=1, le=1_000_000)
    action: str = Field(min_length=1, max_length=64)
    contract_version: int = Field(ge=1, le=1_000_000)
    params_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    source_revision: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:@+=/-]{1,128}$",
        description="The revision of the draft's source the approver saw; present exactly "
        "when the draft has a source (docs/approvals.md).",
    )
    decision: Decision
    approver: str = Field(min_length=1, max_length=128)
    key_id: str = Field(min_length=1, max_length=64)
    issued_at: str = Field(
        pattern=ISSUED_AT_PATTERN, description='RFC 3339 UTC with "Z", e.g. 2026-11-29T10:00:00Z.'
    )
    reason: SignedText | None = Field(default=None, min_length=1, max_length=2000)

    _real_moment = field_validator("issued_at")(real_moment)

    @model_validator(mode="after")
    def _reason_iff_reject(self) -> ApprovalStatement:
        if self.decision is Decision.REJECT and self.reason is None:
            raise ValueError("a rejection must carry a reason")
        if self.decision is Decision.APPROVE and self.reason is not None:
            raise ValueError("only a rejection carries a reason")
        return self


BATCH_STATEMENT_TYPE = "draftgate.batch.v1"
MAX_BATCH = 50
DRAFT_ID = r"^dft_[0-9a-f]{32}$"


class BatchItem(SignedStatement):
    """One draft of a batch, exactly as it binds: the same members as an approval statement's."""

    draft_id: str = Field(pattern=DRAFT_ID)
    revision: int = Field(ge=1, le=1_000_000)
    action: str = Field(min_length=1, max_length=64)
    contract_version: int = Field(ge=1, le=1_000_000)
    params_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    source_revision: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@+=/-]{1,128}$")


class BatchTotal(SignedStatement):
    """What the batch's drafts move in one currency, added up (minor units)."""

    currency: str = Field(pattern=r"^[A-Z]{3}$")
    amount_minor: int = Field(ge=0, le=2**53 - 1)


class BatchStatement(SignedStatement):
    """Exactly the JSON object an approver signs to approve several drafts at once
    (docs/approvals.md, "Batch approval"); JCS(statement) are the signed bytes."""

    type: Literal["draftgate.batch.v1"]
    tenant: str = Field(min_length=1, max_length=64)
    approver: str = Field(min_length=1, max_length=128)
    key_id: str = Field(min_length=1, max_length=64)
    issued_at: str = Field(pattern=ISSUED_AT_PATTERN)
    items: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH)
    totals: list[BatchTotal] = Field(max_length=MAX_BATCH)

    _real_moment = field_validator("issued_at")(real_moment)

    @model_validator(mode="after")
    def _each_once(self) -> BatchStatement:
        ids = [item.draft_id for item in self.items]
        if len(set(ids)) != len(ids):
            raise ValueError("a batch names each draft once")
        currencies = [total.currency for total in self.totals]
        if len(set(currencies)) != len(currencies):
            raise ValueError("a batch gives one total per currency")
        return self

    @property
    def batch_id(self) -> str:
        """``bat_`` and the first 32 hex digits of SHA-256(JCS(statement))."""
        return "bat_" + sha256_hex(canonical_json(self.signed_value()))[:32]


class BatchAsk(StrictInput):
    """Body of POST /v1/approvals/batch/statement: the drafts to approve together."""

    draft_ids: list[Annotated[str, Field(pattern=DRAFT_ID)]] = Field(
        min_length=1, max_length=MAX_BATCH
    )


B64URL = r"^[A-Za-z0-9_-]+$"


class WebAuthnAssertion(StrictInput):
    """A passkey's assertion over the statement (docs/approvals.md, "Passkeys"): what
    ``navigator.credentials.get()`` returned, each part base64url without padding."""

    credential_id: str = Field(min_length=1, max_length=1400, pattern=B64URL)
    authenticator_data: str = Field(min_length=50, max_length=4000, pattern=B64URL)
    client_data_json: str = Field(min_length=1, max_length=4000, pattern=B64URL)
    signature: str = Field(min_length=1, max_length=700, pattern=B64URL)


class SignedRequest(StrictInput):
    """A statement and exactly one of its Ed25519 ``signature`` or a passkey's ``webauthn``
    assertion."""

    signature: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_-]{86}$",
        description="Ed25519: base64url (no padding) of the signature over JCS(statement).",
    )
    webauthn: WebAuthnAssertion | None = Field(
        default=None,
        description="Passkey: the WebAuthn assertion whose challenge is SHA-256(JCS(statement)).",
    )

    @model_validator(mode="after")
    def _one_signature(self) -> SignedRequest:
        if (self.signature is None) == (self.webauthn is None):
            raise ValueError("send exactly one of signature (Ed25519) and webauthn (passkey)")
        return self


class ApprovalRequest(SignedRequest):
    """Body of POST /v1/drafts/{id}/approvals: the statement and exactly one of its Ed25519
    ``signature`` or a passkey's ``webauthn`` assertion."""

    statement: ApprovalStatement


class NarrowRequest(SignedRequest):
    """Body of POST /v1/drafts/{id}/narrow: the narrowed params, and the approver's approval
    statement of the revision they make (the draft's next), signed."""

    params: dict[str, Any] = Field(description="The draft's params, narrowed.")
    statement: ApprovalStatement


class BatchRequest(SignedRequest):
    """Body of POST /v1/approvals/batch: the batch statement and exactly one of its Ed25519
    ``signature`` or a passkey's ``webauthn`` assertion."""

    statement: BatchStatement


def build_statement(
    *,
    tenant: str,
    draft_id: str,
    revision: int,
    action: str,
    contract_version: int,
    params_sha256: str,
    decision: Decision,
    approver: str,
    key_id: str | None,
    issued_at: str,
    reason: str | None = None,
    source_revision: str | None = None,
) -> dict[str, Any]:
    """The statement as a JSON object, exactly in the shape that is signed (DESIGN.md §4)."""
    statement: dict[str, Any] = {
        "type": STATEMENT_TYPE,
        "tenant": tenant,
        "draft_id": draft_id,
        "revision": revision,
        "action": action,
        "contract_version": contract_version,
        "params_sha256": params_sha256,
        "decision": decision.value,
        "approver": approver,
        "key_id": key_id,
        "issued_at": issued_at,
    }
    if source_revision is not None:
        statement["source_revision"] = source_revision
    if reason is not None:
        statement["reason"] = reason
    return statement


def statement_for(
    draft: Mapping[str, Any],
    *,
    decision: Decision,
    approver: str,
    key_id: str | None,
    issued_at: str,
    reason: str | None = None,
    params_sha256: str | None = None,
) -> dict[str, Any]:
    """The statement over a draft as the API shows it (``GET /v1/drafts/{id}``), for a client
    to sign. ``params_sha256``: the digest the signer recomputed from the params it showed
    (by default the one the draft names)."""
    return build_statement(
        tenant=draft["tenant"],
        draft_id=draft["draft_id"],
        revision=draft["revision"],
        action=draft["action"],
        contract_version=draft["contract_version"],
        params_sha256=params_sha256 or draft["params_sha256"],
        decision=decision,
        approver=approver,
        key_id=key_id,
        issued_at=issued_at,
        reason=reason,
        source_revision=draft.get("source_revision"),
    )


def signed_request(statement: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """The body of ``POST /v1/drafts/{id}/approvals``: the statement and its signature
    over JCS(statement)."""
    return {"statement": statement, "signature": sign(key, canonical_json(statement))}


class BatchItemView(BaseModel):
    """One draft of a batch as the approver reads it before signing."""

    model_config = ConfigDict(frozen=True)

    draft_id: str
    revision: int
    action: str
    summary: str
    amount: AmountView | None


class BatchToSign(BaseModel):
    """The batch statement to sign for the drafts asked, and what each of them is."""

    model_config = ConfigDict(frozen=True)

    statement: dict[str, Any]
    items: list[BatchItemView]
    totals: list[AmountView]


class BatchDraftResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    draft_id: str
    status: str
    approvals_received: int
    approvals_required: int


class BatchResult(BaseModel):
    """What a recorded batch did: one approval per draft, and where each draft stands."""

    model_config = ConfigDict(frozen=True)

    batch_id: str
    drafts: list[BatchDraftResult]
