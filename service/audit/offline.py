"""The offline verifier: an NDJSON export (and optionally signed checkpoints) in, a verdict
out. Needs no server and no database; ``draftgate audit verify --file`` runs it.

The export must be complete (unfiltered) for one tenant: a gap in seq is exactly
what a deleted event looks like. The checkpoint public key is pinned by the auditor
(``--public-key`` or a trust file), never taken from the checkpoints file: whoever can
rewrite the log can also serve a checkpoints file signed by a key of their own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import IntEnum
from typing import Any

from service.audit.chain import GENESIS_HASH
from service.audit.verification import Verification, verify_chain
from service.signing import b64url_decode, key_id_for, parse_public_key


class ExportError(ValueError):
    """An input of the offline verifier (export, checkpoints or trust file) is unusable."""


class Verdict(IntEnum):
    """The exit codes of ``draftgate audit verify --file`` (docs/audit.md)."""

    OK = 0  # the chain links and a pinned checkpoint covers its last event
    TAMPERED = 1  # the chain or a checkpoint contradicts the export
    CANNOT_VERIFY = 2  # no pinned key, an unreadable file, a bad key
    UNANCHORED = 3  # the chain links, but no checkpoint covers its tail


def verdict(result: Verification) -> Verdict:
    if not result.ok:
        return Verdict.TAMPERED
    return Verdict.OK if result.anchored else Verdict.UNANCHORED


UNANCHORED_MESSAGE = "unanchored: truncation of the tail cannot be detected"


def unanchored_reason(result: Verification) -> str:
    """Which events of a verified chain no checkpoint vouches for, in words."""
    if result.head_seq == 0:
        return f"{UNANCHORED_MESSAGE}: the chain is empty and no checkpoint says how long it was"
    newest = f"seq {result.anchored_seq}" if result.checkpoints_checked else "none"
    return (
        f"{UNANCHORED_MESSAGE}: no checkpoint covers seq {result.anchored_seq + 1} to "
        f"{result.head_seq} (newest checkpoint: {newest}); "
        f"{result.events_checked} events verify and link"
    )


def verify_export(
    lines: Iterable[str],
    *,
    checkpoints: Sequence[Mapping[str, Any]] = (),
    checkpoint_public_key: str | None = None,
    claimed_public_key: str | None = None,
) -> Verification:
    """Verify an export against checkpoints signed by the pinned ``checkpoint_public_key``.

    ``claimed_public_key`` is the key the checkpoints file names: any other key than the
    pinned one fails, since checkpoints signed by an unpinned key never count.
    """
    if claimed_public_key is not None and checkpoint_public_key is not None:
        mismatch = _key_mismatch(claimed_public_key, checkpoint_public_key)
        if mismatch is not None:
            return Verification(False, 0, 0, GENESIS_HASH, None, mismatch)
    events = _events(lines)
    first = next(events, None)
    tenant = first["tenant"] if first is not None else None
    relevant = [c for c in checkpoints if tenant is None or c.get("tenant") == tenant]
    if checkpoints and not relevant:
        # Checkpoints that cover nothing in the export prove nothing: that is no pass.
        return Verification(
            False,
            0,
            0,
            GENESIS_HASH,
            None,
            f"none of the {len(checkpoints)} checkpoints are for {tenant}, the export's tenant",
        )
    chain = _one_tenant(first, events) if first is not None else iter(())
    return verify_chain(chain, checkpoints=relevant, checkpoint_public_key=checkpoint_public_key)


# Exactly the fields of an exported event (docs/audit.md): nothing may ride along unhashed.
_TEXT = (str,)
_OPTIONAL_TEXT = (str, type(None))
FIELDS: dict[str, tuple[type, ...]] = {
    "seq": (int,),
    "at": _TEXT,
    "tenant": _TEXT,
    "actor": _TEXT,
    "type": _TEXT,
    "draft_id": _OPTIONAL_TEXT,
    "execution_id": _OPTIONAL_TEXT,
    "trace_id": _OPTIONAL_TEXT,
    "data": (dict,),
    "prev_hash": _TEXT,
    "hash": _TEXT,
}


# json.loads makes only exact types, so an exact-type test is the isinstance test (minus
# bool for int) at a third of the cost: it runs for every line of an export.
_EXACT_TYPES = {name: frozenset(types) for name, types in FIELDS.items()}


CHECKPOINT_FIELDS: dict[str, tuple[type, ...]] = {
    "tenant": _TEXT,
    "seq": (int,),
    "hash": _TEXT,
    "at": _TEXT,
    "key_id": _TEXT,
    "signature": _TEXT,
}


def read_checkpoints(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """Checkpoints and the public key they claim, from ``GET /v1/audit/checkpoints`` output."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportError(f"the checkpoints file is not JSON: {exc}") from None
    if isinstance(document, list):
        return document, None
    if not isinstance(document, dict) or not isinstance(document.get("checkpoints"), list):
        raise ExportError("the checkpoints file has no checkpoints list")
    listed = document["checkpoints"]
    claimed = document.get("public_key")
    for number, checkpoint in enumerate(listed, start=1):
        if not isinstance(checkpoint, dict) or any(
            not isinstance(checkpoint.get(name), types) or isinstance(checkpoint.get(name), bool)
            for name, types in CHECKPOINT_FIELDS.items()
        ):
            raise ExportError(f"checkpoint {number} is not a signed checkpoint")
    if claimed is not None and not isinstance(claimed, str):
        raise ExportError("the checkpoints file's public_key is not a string")
    return listed, claimed


# What a trust file is: the output of ``draftgate audit checkpoint-key --json``. The type
# keeps a checkpoints file (which names a public key too) from being taken for one.
TRUST_TYPE = "draftgate.checkpoint_key.v1"


def trust_document(public_key: str) -> dict[str, str]:
    """The trust file for a checkpoint public key, as operators hand it to auditors."""
    return {"type": TRUST_TYPE, "public_key": public_key, "key_id": key_id_for(public_key)}


def read_trust_file(text: str) -> str:
    """The pinned checkpoint public key from a trust file; ExportError if it is not one."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportError(f"the trust file is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("type") != TRUST_TYPE:
        raise ExportError(
            f'the trust file is not a checkpoint key (its "type" must be "{TRUST_TYPE}"); '
            "an operator writes it with `draftgate audit checkpoint-key --json`"
        )
    public_key, key_id = document.get("public_key"), document.get("key_id")
    try:
        parse_public_key(public_key if isinstance(public_key, str) else "")
    except ValueError as exc:  # a weak key too: it would "verify" forged checkpoints
        raise ExportError(
            f"the trust file's public_key is not a usable Ed25519 public key: {exc}"
        ) from None
    if key_id is not None and key_id != key_id_for(str(public_key)):
        raise ExportError("the trust file's key_id does not match its public_key")
    return str(public_key)


def _key_mismatch(claimed: str, pinned: str) -> str | None:
    try:
        named = key_id_for(claimed)
    except ValueError:
        named = "a key that is not base64url"
    if named == key_id_for(pinned) and b64url_decode(claimed) == b64url_decode(pinned):
        return None
    return (
        f"the checkpoints file names {named}, not the pinned key {key_id_for(pinned)}: "
        "checkpoints signed by an unpinned key never count"
    )


def _events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExportError(f"line {number} is not JSON: {exc}") from None
        problem = _shape_problem(event)
        if problem:
            raise ExportError(f"line {number} is not an audit event: {problem}")
        yield event


def _shape_problem(event: Any) -> str | None:
    if not isinstance(event, dict):
        return "not a JSON object"
    if event.keys() != FIELDS.keys():
        missing, extra = FIELDS.keys() - event.keys(), event.keys() - FIELDS.keys()
        return f"missing {sorted(missing)}, unexpected {sorted(extra)}"
    for name, types in _EXACT_TYPES.items():
        if type(event[name]) not in types:
            return f"{name} has the wrong type"
    return None


def _one_tenant(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    for event in rest:
        if event.get("tenant") != first["tenant"]:
            raise ExportError("the export mixes tenants; export one tenant's chain")
        yield event
