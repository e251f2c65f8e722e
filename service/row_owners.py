"""Who writes which columns: one owner per state machine (STYLE.md), listed once.

Each entry names a table, its model, the module (under ``service/``) that owns its state
machine — the one that knows the allowed moves, their audit events and side effects — and
the columns only that module writes. tests/test_row_owners.py refuses every other write of
them (assignment, ``setattr``, a constructor argument, ``update/insert(...).values``); an
owner may read the list to refuse a caller who hands one of its columns in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Owned:
    model: str
    owners: tuple[str, ...]  # paths under service/
    columns: frozenset[str]


_LEASED = frozenset(
    {"status", "attempts", "lease_expires_at", "next_attempt_at", "publishes", "republish_at"}
)

ROW_OWNERS: dict[str, Owned] = {
    "drafts": Owned(
        "Draft",
        ("drafts/state.py",),
        frozenset({"status", "status_reason", "open_dedupe_key", "revision", "contract_version"}),
    ),
    "executions": Owned("Execution", ("executions/state.py",), _LEASED),
    "webhook_deliveries": Owned("WebhookDelivery", ("webhooks/state.py",), _LEASED),
    "outbox_messages": Owned(
        "OutboxMessage", ("executions/outbox.py",), frozenset({"published_at", "publish_count"})
    ),
    "key_enrolments": Owned("KeyEnrolment", ("keys/enrolments.py",), frozenset({"status"})),
    # The reference downstream business system's own state (its seed and its actions).
    "shop_orders": Owned("Order", ("shop/definitions.py", "shop/seed.py"), frozenset({"status"})),
}
