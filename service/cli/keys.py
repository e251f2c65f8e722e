"""``draftgate keys``: approver signing keys. Generating happens locally; the private key
never leaves its file. Registering and revoking are operator tasks (database access)."""

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
from service.signing import generate_private_key, key_id_for, public_key_b64, write_private_key

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
