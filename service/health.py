"""What readiness probes and ``draftgate doctor`` check (no framework, no Celery).

Every check answers "ok" or what is wrong, in words an operator can act on; a check never
raises (a probe that crashes reports nothing). Readiness is what the API answers on
/readyz; ``doctor`` is the same and more, for one component (its healthcheck in
compose.yaml) or for the whole stack on one machine.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from cryptography.exceptions import UnsupportedAlgorithm
from sqlalchemy import Engine, create_engine, make_url, text
from sqlmodel import Session

from service.config import Settings
from service.signing import load_private_key, parse_public_key, public_key_b64
from service.sql import utcnow

TIMEOUT_SECONDS = 2.0
OK = "ok"

Component = Literal["api", "mcp", "worker", "beat"]
# The worker runs draftgate.checkpoint, so it holds the private key; beat only schedules the
# task, and the API and the MCP server verify with the public key alone.
SIGNING_COMPONENTS: frozenset[Component] = frozenset({"worker"})
# The MCP server only proposes drafts: nothing it does goes through the broker.
BROKER_COMPONENTS: frozenset[Component] = frozenset({"api", "worker", "beat"})
# Who verifies approvers' signatures: the API (approvals, the execute gate) and the worker.
VERIFYING_COMPONENTS: frozenset[Component] = frozenset({"api", "worker"})

# Reading a key file fails with these: missing or unreadable (OSError), not a PEM key, not
# Ed25519 or encrypted (ValueError, TypeError), an algorithm this build does not support.
KEY_FILE_ERRORS = (OSError, ValueError, TypeError, UnsupportedAlgorithm)


def broker_reachable(url: str) -> str:
    """ "ok", or why the broker cannot be reached."""
    if url.startswith("sqla+"):  # kombu's server-less SQLAlchemy transport: query its database
        engine = create_engine(url.removeprefix("sqla+"))
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            return OK
        except Exception as exc:  # a probe reports, it does not raise
            return f"unavailable: {type(exc).__name__}"
        finally:
            engine.dispose()
    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or _default_port(parts.scheme)
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT_SECONDS):
            return OK
    except OSError as exc:
        return f"unavailable: {exc.strerror or type(exc).__name__}"


def _default_port(scheme: str) -> int:
    return {"redis": 6379, "rediss": 6380, "amqp": 5672}.get(scheme, 6379)


def readiness(engine: Engine, settings: Settings, component: Component = "api") -> dict[str, str]:
    """Each check: "ok", or what is wrong. Ready means every check is ok.

    The API needs the database and the broker (execute hands off through it) and reports an
    unanchored audit log. The MCP server needs only the database: nothing it does goes
    through the broker, and a load balancer must not take every agent's door away because
    the checkpoints stopped (the API's readiness and ``doctor`` say that)."""
    checks = {"database": database_reachable(engine)}
    if component == "mcp":
        return checks
    checks["broker"] = broker_reachable(settings.resolved_broker_url())
    if checks["database"] == OK:
        checks["audit_checkpoints"] = audit_anchored(engine, settings)
    return checks


def is_ready(checks: dict[str, str]) -> bool:
    return all(value == OK for value in checks.values())


def database_reachable(engine: Engine) -> str:
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:  # a probe reports, it does not raise
        return f"unavailable: {type(exc).__name__}"
    return OK


def audit_anchored(engine: Engine, settings: Settings) -> str:
    from service.audit.health import checkpoint_health  # the audit domain, only when asked

    with Session(engine) as session:
        health = checkpoint_health(session, settings, now=utcnow())
    if health.ok:
        return OK
    if not settings.checkpoint_public_key and settings.resolved_checkpoint_key_file().exists():
        # Without a configured public key the key file is the trust root: one that exists
        # but cannot be read anchors nothing (it trusts no key); name what is wrong with it.
        problem = checkpoint_key_status(settings)
        if problem != OK:
            return f"not anchored: {problem}"
    return f"not anchored: {health.detail}"


def checkpoint_key_status(settings: Settings) -> str:
    """ "ok" when the checkpoint private key can be loaded (and is the trusted one, when
    DRAFTGATE_CHECKPOINT_PUBLIC_KEY pins it); otherwise what is wrong with it."""
    path = settings.resolved_checkpoint_key_file()
    try:
        key = load_private_key(path)
    except FileNotFoundError:
        return (
            f"missing: no checkpoint key at {path}; create it with "
            "`draftgate audit checkpoint-key --generate` (no audit checkpoints are made)"
        )
    except OSError as exc:  # permissions, a directory where the file should be…
        return f"unreadable: {path}: {exc.strerror or type(exc).__name__}; {_readable_hint()}"
    except KEY_FILE_ERRORS:
        return (
            f"invalid: {path} is not an unencrypted Ed25519 private key in PEM "
            "(the signer runs unattended: it cannot ask for a passphrase)"
        )
    public = public_key_b64(key)
    pinned = settings.checkpoint_public_key
    try:
        if pinned:
            parse_public_key(pinned)
    except ValueError as exc:  # a weak pinned key would "verify" forged checkpoints
        return f"invalid: DRAFTGATE_CHECKPOINT_PUBLIC_KEY is not a usable Ed25519 key: {exc}"
    if pinned and public != pinned:
        return (
            f"mismatch: the key at {path} has public key {public}, not the trusted "
            f"DRAFTGATE_CHECKPOINT_PUBLIC_KEY {pinned}: what it signs would not verify"
        )
    return OK


SHOWN_WEAK_KEYS = 10


def approver_keys_status(engine: Engine) -> str:
    """ "ok" when every active approver key and passkey holds a strong public key; otherwise
    which do not (they never count, but an operator should revoke them and find out how a
    weak key got into the database)."""
    from service.keys.strength import weak_credentials  # the keys domain, only when asked

    with Session(engine) as session:
        weak = weak_credentials(session)
    if not weak:
        return OK
    named = ", ".join(f"{w.tenant}/{w.key_id} of {w.approver}" for w in weak[:SHOWN_WEAK_KEYS])
    more = f" and {len(weak) - SHOWN_WEAK_KEYS} more" if len(weak) > SHOWN_WEAK_KEYS else ""
    return (
        f"weak: {len(weak)} active credential(s) hold a weak public key (small-order, "
        f"mixed-order or non-canonical) and never count: {named}{more}; revoke each "
        "(`draftgate keys revoke KEY_ID`, `keys revoke-passkey KEY_ID`) and enrol a new key"
    )


def secret_key_status(path: Path) -> str:
    """ "ok" when the server secret can be read and is long enough; never creates it."""
    from service.cursors import KEY_BYTES

    try:
        secret = path.read_bytes().strip()
    except FileNotFoundError:
        return (
            f"missing: no secret key at {path} (DRAFTGATE_SECRET_KEY_FILE); a server would "
            "create its own, and every replica must read the same one"
        )
    except OSError as exc:
        return f"unreadable: {path}: {exc.strerror or type(exc).__name__}; {_readable_hint()}"
    if len(secret) < KEY_BYTES:
        return f"invalid: the secret key in {path} is shorter than {KEY_BYTES} bytes"
    return OK


def _readable_hint() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else "this process's user"
    return f"the file must be readable by uid {uid}, the user this process runs as"


def doctor(settings: Settings, component: Component | None = None) -> dict[str, str]:
    """Every check ``component`` needs to do its job ("ok", or what is wrong), in order.

    Without a component, every check: the whole stack on one machine, as ``draftgate dev``
    runs it. Nothing is migrated or signed, and a missing database file is reported, not
    created.
    """
    from service.db import make_engine
    from service.migrate import schema_status

    url = settings.resolved_database_url()
    checks = {"database": _database_file_missing(url)}
    engine = make_engine(url)
    try:
        if checks["database"] == OK:
            checks["database"] = database_reachable(engine)
        checks["schema"] = _after(checks["database"], "database", lambda: schema_status(engine))
        if component is None or component in BROKER_COMPONENTS:
            checks["broker"] = broker_reachable(settings.resolved_broker_url())
        if component is None or component in SIGNING_COMPONENTS:
            checks["checkpoint_key"] = checkpoint_key_status(settings)
        checks["audit_checkpoints"] = _after(
            checks["schema"], "schema", lambda: audit_anchored(engine, settings)
        )
        if component is None or component in VERIFYING_COMPONENTS:
            checks["approver_keys"] = _after(
                checks["schema"], "schema", lambda: approver_keys_status(engine)
            )
    finally:
        engine.dispose()
    if settings.secret_key_file is not None:
        checks["secret_key"] = secret_key_status(settings.secret_key_file)
    return checks


def _database_file_missing(url: str) -> str:
    """A SQLite file that does not exist would be created by connecting: say so instead."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return OK
    if database.startswith("file:") or Path(database).exists():
        return OK
    return f"unavailable: no database at {database}; run `draftgate migrate`"


def _after(prerequisite: str, name: str, check: Callable[[], str]) -> str:
    if prerequisite != OK:
        return f"not checked: the {name} check failed"
    try:
        return check()
    except Exception as exc:  # a probe reports, it does not raise
        return f"failed: {type(exc).__name__}"
