"""``draftgate keys``: approver signing keys. Generating happens locally; the private key
never leaves its file. Registering and revoking, deciding on the keys and passkeys approvers
enrolled in the console, and revoking passkeys are operator tasks (database access)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from service.cli.common import (
    OPERATOR,
    JsonOption,
    TenantOption,
    as_operator,
    fail,
    print_json,
    print_table,
    tenant_or_default,
)
from service.cli.passphrase import PASSPHRASE_ENV, new_passphrase
from service.keys import actions as keys
from service.keys import enrolments, passkeys
from service.keys.models import EnrolmentStatus
from service.keys.schemas import EnrolmentInfo
from service.signing import generate_private_key, key_id_for, public_key_b64, write_private_key
from service.sql import utcnow

app = typer.Typer(help="Generate, register, revoke and list approver keys.", no_args_is_help=True)


@app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="Where to write the private key.")],
    encrypt: Annotated[
        bool,
        typer.Option(
            "--encrypt/--no-encrypt",
            help=f"Encrypt the key with a passphrase ({PASSPHRASE_ENV}, else asked twice).",
        ),
    ] = True,
) -> None:
    """Create an Ed25519 key pair: private key to --out (mode 0600), public key printed."""
    if os.path.lexists(out):  # before asking for a passphrase; O_EXCL still decides below
        fail(f"{out} exists; refusing to overwrite a key")
    secret = new_passphrase(out) if encrypt else None
    key = generate_private_key()
    try:
        write_private_key(key, out, passphrase=secret)
    except FileExistsError:
        fail(f"{out} exists; refusing to overwrite a key")
    public = public_key_b64(key)
    if secret is None:
        typer.echo(
            f"warning: {out} is not encrypted: anyone who can read it can sign as you", err=True
        )
    protection = "encrypted with your passphrase" if secret is not None else "NOT encrypted"
    typer.echo(f"private key: {out} (mode 0600, {protection}; keep it to yourself)")
    typer.echo(f"public key:  {public}")
    typer.echo(f"key id:      {key_id_for(public)}")


@app.command("register")
def register(
    approver: Annotated[str, typer.Option(help="The approver's subject (as in their token).")],
    public_key: Annotated[str, typer.Option(help="Raw Ed25519 public key, base64url.")],
    label: Annotated[str, typer.Option(help="A note.")] = "",
    tenant: TenantOption = None,
) -> None:
    """Register an approver's public key."""
    info = as_operator(
        lambda session: keys.register(
            session,
            tenant=tenant_or_default(tenant),
            approver=approver,
            public_key=public_key,
            label=label,
            actor=OPERATOR,
        )
    )
    typer.echo(f"registered {info.key_id} for {info.approver}")


@app.command("revoke")
def revoke(key_id: str, tenant: TenantOption = None) -> None:
    """Revoke a key: nothing it signs is accepted from now on."""
    info = as_operator(
        lambda session: keys.revoke(
            session,
            tenant=tenant_or_default(tenant),
            key_id=key_id,
            actor=OPERATOR,
        )
    )
    typer.echo(f"revoked {info.key_id} of {info.approver}")


@app.command("list")
def list_keys(
    tenant: TenantOption = None,
    approver: Annotated[str | None, typer.Option(help="Only this approver's keys.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List registered keys."""
    infos = as_operator(
        lambda session: keys.list_keys(session, tenant=tenant_or_default(tenant), approver=approver)
    )
    if as_json:
        print_json([info.model_dump(mode="json") for info in infos])
        return
    print_table(
        ["key id", "approver", "active", "label", "created"],
        [
            [
                i.key_id,
                i.approver,
                "yes" if i.active else "revoked",
                i.label,
                i.created_at.isoformat(timespec="seconds"),
            ]
            for i in infos
        ],
    )


@app.command("enrolments")
def list_enrolments(
    tenant: TenantOption = None,
    status: Annotated[
        EnrolmentStatus | None, typer.Option(help="pending, approved or rejected (default: all).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List credentials approvers enrolled (browser keys and passkeys) and their status."""
    infos = as_operator(
        lambda session: enrolments.operator_enrolments(
            session, tenant=tenant_or_default(tenant), status=status
        )
    )
    if as_json:
        print_json([info.model_dump(mode="json") for info in infos])
        return
    print_table(
        ["enrolment id", "kind", "approver", "key id", "status", "label", "created"],
        [
            [
                i.enrolment_id,
                i.kind.value,
                i.approver,
                i.key_id,
                i.status.value,
                i.label,
                i.created_at.isoformat(timespec="seconds"),
            ]
            for i in infos
        ],
    )


@app.command("approve-enrolment")
def approve_enrolment(enrolment_id: str, tenant: TenantOption = None) -> None:
    """Approve an enrolment: the browser key or passkey becomes an active credential."""
    info = _decide(enrolment_id, tenant, approve=True)
    typer.echo(f"approved {info.enrolment_id}: {info.key_id} of {info.approver} is active")


@app.command("reject-enrolment")
def reject_enrolment(
    enrolment_id: str,
    reason: Annotated[str, typer.Option(help="Why (kept with the enrolment).")],
    tenant: TenantOption = None,
) -> None:
    """Reject an enrolment: nothing becomes usable."""
    info = _decide(enrolment_id, tenant, approve=False, reason=reason)
    typer.echo(f"rejected {info.enrolment_id} of {info.approver}")


@app.command("passkeys")
def list_passkeys(
    tenant: TenantOption = None,
    approver: Annotated[str | None, typer.Option(help="Only this approver's passkeys.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List registered passkeys."""
    infos = as_operator(
        lambda session: passkeys.list_passkeys(
            session, tenant=tenant_or_default(tenant), approver=approver
        )
    )
    if as_json:
        print_json([info.model_dump(mode="json") for info in infos])
        return
    print_table(
        ["key id", "approver", "active", "sign count", "label", "created"],
        [
            [
                i.key_id,
                i.approver,
                "yes" if i.active else "revoked",
                i.sign_count,
                i.label,
                i.created_at.isoformat(timespec="seconds"),
            ]
            for i in infos
        ],
    )


@app.command("revoke-passkey")
def revoke_passkey(key_id: str, tenant: TenantOption = None) -> None:
    """Revoke a passkey: nothing it signs is accepted from now on."""
    info = as_operator(
        lambda session: passkeys.revoke(
            session, tenant=tenant_or_default(tenant), key_id=key_id, actor=OPERATOR, now=utcnow()
        )
    )
    typer.echo(f"revoked {info.key_id} of {info.approver}")


def _decide(
    enrolment_id: str, tenant: str | None, *, approve: bool, reason: str | None = None
) -> EnrolmentInfo:
    decider = enrolments.Decider(tenant=tenant_or_default(tenant), actor=OPERATOR)
    return as_operator(
        lambda session: enrolments.decide(
            session,
            decider,
            enrolment_id=enrolment_id,
            approve=approve,
            reason=reason,
            now=utcnow(),
        )
    )
