"""The offline verifier: an NDJSON export (and optionally signed checkpoints) in, a verdict
out. Needs no server and no database; ``draftgate audit verify --file`` runs it.

The export must be complete (unfiltered) for one tenant: a gap in seq is exactly
what a deleted event looks like.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from service.audit.chain import GENESIS_HASH
from service.audit.verification import Verification, verify_chain


class ExportError(ValueError):
    """The file is not a draftgate audit export."""


def verify_export(
    lines: Iterable[str],
    *,
    checkpoints: Sequence[Mapping[str, Any]] = (),
    checkpoint_public_key: str | None = None,
) -> Verification:
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
    for name, types in FIELDS.items():
        value = event[name]
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{name} has the wrong type"
    return None


def _one_tenant(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    for event in rest:
        if event.get("tenant") != first["tenant"]:
            raise ExportError("the export mixes tenants; export one tenant's chain")
        yield event
