"""``draftgate policies simulate``: a proposed policy file judged against the drafts of the
last days before it is switched on (shadow mode; nothing is written). For operators with
database access, like ``draftgate migrate``."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from service.cli.common import JsonOption, echo, print_json, print_table
from service.config import get_settings

if TYPE_CHECKING:  # imported when the command runs: `draftgate --help` stays fast
    from service.drafts.simulation import Judged, Simulation

app = typer.Typer(help="Try approval policies before switching them on.", no_args_is_help=True)


@app.command("simulate")
def simulate(
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            exists=True,
            dir_okay=False,
            help="The proposed policies: JSON in the shape of DRAFTGATE_POLICIES.",
        ),
    ],
    days: Annotated[int, typer.Option(min=1, max=366, help="How far back to look.")] = 30,
    tenant: Annotated[str | None, typer.Option(help="One tenant (default: all).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Judge the drafts of the last DAYS under the proposed policies: how many approvals
    each would have needed, beside what the configured policies ask."""
    from service.db import make_engine, read_scope
    from service.drafts.simulation import simulate as judge
    from service.policies.actions import PolicyError, load_policies
    from service.sql import utcnow

    settings = get_settings()
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise PolicyError("the file must hold one JSON object: action name to policy")
        proposed = load_policies(raw)
    except (ValueError, PolicyError) as refused:  # json.JSONDecodeError is a ValueError
        echo(f"error: {file}: {refused}", err=True)
        raise typer.Exit(code=2) from None
    engine = make_engine(settings.resolved_database_url())
    try:
        with read_scope(engine) as session:
            result = judge(
                session,
                load_policies(settings.policies),
                proposed,
                since=utcnow() - timedelta(days=days),
                tenant=tenant,
                default_ttl_seconds=settings.default_draft_ttl_seconds,
            )
    finally:
        engine.dispose()
    _report(result, days, as_json=as_json)


def _report(result: Simulation, days: int, *, as_json: bool) -> None:
    changed = [d for d in result.drafts if d.proposed != d.now or d.grant]
    summary = {
        "drafts": len(result.drafts),
        "more": result.count("more"),
        "fewer": result.count("fewer"),
        "same": result.count("same"),
        "granted": result.granted,
        "truncated": result.truncated,
        "notes": result.notes,
    }
    if as_json:
        print_json({**summary, "changed": [_row(d) for d in changed]})
        return
    print_table(
        [
            "draft",
            "tenant",
            "action",
            "amount",
            "status",
            "now",
            "proposed",
            "proposed rule",
            "grant",
        ],
        [
            [
                d.draft_id,
                d.tenant,
                d.action,
                d.amount.display if d.amount else "",
                d.status,
                d.now,
                d.proposed,
                d.rule,
                d.grant or "",
            ]
            for d in changed
        ],
    )
    echo(
        f"{summary['drafts']} drafts in the last {days} days: {summary['more']} would need more "
        f"approvals, {summary['fewer']} fewer, {summary['same']} the same; "
        f"{summary['granted']} covered by a standing grant"
        + (" (only the first 10,000 were judged)" if result.truncated else "")
    )
    for note in result.notes:
        echo(f"note: {note}")


def _row(judged: Judged) -> dict[str, Any]:
    return {
        "draft_id": judged.draft_id,
        "tenant": judged.tenant,
        "action": judged.action,
        "status": judged.status,
        "created_at": judged.created_at.isoformat(),
        "amount": judged.amount.model_dump() if judged.amount else None,
        "recorded": judged.recorded,
        "now": judged.now,
        "proposed": judged.proposed,
        "rule": judged.rule,
        "grant": judged.grant,
    }
