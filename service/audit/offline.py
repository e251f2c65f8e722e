"""The offline verifier: an NDJSON export (and optionally signed checkpoints) in, a verdict
out. Needs no server and no database; ``draftgate audit verify --file`` runs it.

The export must be complete (unfiltered) for one tenant: a gap in seq is exactly
what a deleted event looks like.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

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
    chain = _one_tenant(first, events) if first is not None else iter(())
    return verify_chain(chain, checkpoints=relevant, checkpoint_public_key=checkpoint_public_key)


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
    return document["checkpoints"], document.get("public_key")


def _events(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ExportError(f"line {number} is not JSON: {exc}") from None
        if not isinstance(event, dict) or not {"seq", "hash", "prev_hash"} <= event.keys():
            raise ExportError(f"line {number} is not an audit event")
        yield event


def _one_tenant(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    for event in rest:
        if event.get("tenant") != first["tenant"]:
            raise ExportError("the export mixes tenants; export one tenant's chain")
        yield event
