"""``draftgate audit``: check the tamper-evident log."""

from __future__ import annotations

from typing import Annotated

import typer

from service.audit import actions as audit
from service.cli.common import print_json, runtime
from service.config import get_settings
from service.db import session_scope

app = typer.Typer(help="Verify the audit log.", no_args_is_help=True)


@app.command("verify")
def verify(
    tenant: Annotated[
        str | None, typer.Option(help="Tenant (default: DRAFTGATE_DEFAULT_TENANT).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Recompute the tenant's hash chain; on tampering exit 1 and name the first bad seq."""
    rt = runtime()
    tenant = tenant or get_settings().default_tenant
    with session_scope(rt.engine) as session:
        result = audit.verify(session, tenant)
    if as_json:
        print_json(
            {
                "ok": result.ok,
                "events_checked": result.events_checked,
                "head": {"seq": result.head_seq, "hash": result.head_hash},
                "first_bad_seq": result.first_bad_seq,
                "problem": result.problem,
            }
        )
    elif result.ok:
        typer.echo(
            f"ok: {result.events_checked} events of tenant {tenant} verify; "
            f"head seq {result.head_seq} hash {result.head_hash}"
        )
    else:
        typer.echo(
            f"TAMPERED: tenant {tenant}, first bad seq {result.first_bad_seq}: "
            f"{result.problem} ({result.events_checked} events verified before it)",
            err=True,
        )
    if not result.ok:
        raise typer.Exit(code=1)
