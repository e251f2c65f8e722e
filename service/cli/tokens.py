"""``draftgate tokens``: issue, revoke and list bearer tokens (operators, with database access)."""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli.common import (
    OPERATOR,
    JsonOption,
    TenantOption,
    as_operator,
    print_json,
    print_table,
    tenant_or_default,
)
from service.principal import Role
from service.tokens import actions as tokens

app = typer.Typer(help="Issue, revoke and list bearer tokens.", no_args_is_help=True)


@app.command("issue")
def issue(
    subject: Annotated[str, typer.Option(help="Who the token identifies, e.g. alice.")],
    role: Annotated[Role, typer.Option(help="agent, approver, auditor or admin.")],
    on_behalf_of: Annotated[
        str | None, typer.Option(help="For agent tokens: the end user the agent acts for.")
    ] = None,
    label: Annotated[str, typer.Option(help="A note to recognise the token by.")] = "",
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue a token. The secret is printed once and stored only as a hash."""
    issued = as_operator(
        lambda session: tokens.issue(
            session,
            tenant=tenant_or_default(tenant),
            subject=subject,
            role=role,
            on_behalf_of=on_behalf_of,
            label=label,
            actor=OPERATOR,
        )
    )
    if as_json:
        print_json(issued.model_dump(mode="json"))
        return
    typer.echo(f"token id: {issued.token_id}")
    typer.echo(f"token:    {issued.token}")
    typer.echo("Store the token now: it cannot be shown again.", err=True)


@app.command("revoke")
def revoke(token_id: str, tenant: TenantOption = None) -> None:
    """Revoke a token by id; every later request with it is refused."""
    info = as_operator(
        lambda session: tokens.revoke(
            session,
            tenant=tenant_or_default(tenant),
            token_id=token_id,
            actor=OPERATOR,
        )
    )
    typer.echo(f"revoked {info.token_id} ({info.role.value} {info.subject})")


@app.command("list")
def list_tokens(
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a tenant's tokens (never their secrets)."""
    infos = as_operator(
        lambda session: tokens.list_tokens(session, tenant=tenant_or_default(tenant))
    )
    if as_json:
        print_json([info.model_dump(mode="json") for info in infos])
        return
    print_table(
        ["id", "role", "subject", "on behalf of", "label", "created", "revoked"],
        [
            [
                i.token_id,
                i.role.value,
                i.subject,
                i.on_behalf_of,
                i.label,
                i.created_at.isoformat(timespec="seconds"),
                i.revoked_at.isoformat(timespec="seconds") if i.revoked_at else "",
            ]
            for i in infos
        ],
    )
