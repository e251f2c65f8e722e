"""The demo tenant: shop data, one token per kind of user, approver keys, and the manifest.

The manifest (``<state-dir>/demo.json``) is what the README's "try it" section
and external test harnesses read; its keys are a contract.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sqlmodel import Session

from service.keys import actions as keys
from service.principal import Role
from service.shop.seed import DEMO_CUSTOMER, OTHER_CUSTOMER, seed_shop
from service.signing import generate_private_key, public_key_b64, write_private_key
from service.sql import utcnow
from service.tokens import actions as tokens

MANIFEST_ORDERS = (
    "pending_payment",
    "paid",
    "shipped",
    "delivered",
    "delivered_long_ago",
    "other_customer",
)
SEEDER = "operator:demo-seed"


def seed_demo(
    session: Session, *, tenant: str, state_dir: Path, api_url: str, mcp_url: str
) -> dict[str, Any]:
    """Seed a fresh database and return the manifest (not yet written)."""
    orders = seed_shop(session, tenant, now=utcnow())
    grants = {
        "agent": ("support-agent", Role.AGENT, DEMO_CUSTOMER),
        "agent_other_customer": ("support-agent", Role.AGENT, OTHER_CUSTOMER),
        "approver_alice": ("alice", Role.APPROVER, None),
        "approver_bob": ("bob", Role.APPROVER, None),
        "auditor": ("audrey", Role.AUDITOR, None),
        "admin": ("root", Role.ADMIN, None),
    }
    issued = {
        name: tokens.issue(
            session,
            tenant=tenant,
            subject=subject,
            role=role,
            on_behalf_of=on_behalf_of,
            label=f"demo {name}",
            actor=SEEDER,
        ).token
        for name, (subject, role, on_behalf_of) in grants.items()
    }
    approvers: dict[str, dict[str, str]] = {}
    for approver in ("alice", "bob"):
        private_key = generate_private_key()
        key_file = (state_dir / "keys" / f"{approver}.pem").resolve()
        key_file.unlink(missing_ok=True)
        # Unencrypted on purpose: throwaway keys of a demo tenant, listed in the manifest next
        # to the bearer tokens they go with, and `draftgate dev` must start with one command
        # and no prompt. Real approvers' keys come from `keys generate` (encrypted by default).
        write_private_key(private_key, key_file, passphrase=None)
        registered = keys.register(
            session,
            tenant=tenant,
            approver=approver,
            public_key=public_key_b64(private_key),
            label=f"demo key of {approver}",
            actor=SEEDER,
        )
        approvers[approver] = {"key_id": registered.key_id, "private_key_file": str(key_file)}
    return {
        "api_url": api_url,
        "mcp_url": mcp_url,
        "tenant": tenant,
        "tokens": issued,
        "approvers": approvers,
        "orders": {key: orders[key] for key in MANIFEST_ORDERS},
    }


def write_manifest(manifest: dict[str, Any], path: Path) -> None:
    """Write the manifest owner-readable only: it holds bearer tokens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
    temporary.replace(path)
