"""``draftgate gateway``: check the gateway file against its upstreams, and re-read them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from service.cli.common import JsonOption, echo, fail, print_json, print_table
from service.cli.gateway_openapi import import_openapi
from service.config import get_settings
from service.gateway.build import build_gateway, wait_budget
from service.gateway.errors import GatewayError
from service.gateway.kinds import GatewayReport
from service.gateway.mcp import close_upstreams
from service.registry.loader import exposed_name

app = typer.Typer(
    help="Check the gateway file against its upstreams, and re-read their catalogues.",
    no_args_is_help=True,
)

FileOption = Annotated[
    Path | None,
    typer.Option("--file", help="The gateway file (default: DRAFTGATE_GATEWAY_FILE)."),
]


def _build(file: Path | None, *, record: bool) -> GatewayReport:
    from service.db import make_engine
    from service.policies.actions import load_policies
    from service.registry.loader import load_registry

    settings = get_settings()
    path = file or settings.gateway_file
    if path is None:
        fail("no gateway file: pass --file or set DRAFTGATE_GATEWAY_FILE")
    shop = load_registry(settings.action_modules)
    engine = make_engine(settings.resolved_database_url()) if record else None
    try:
        return build_gateway(
            path,
            reserved=[action.name for action in shop],
            policies=load_policies(settings.policies),
            engine=engine,
            refresh=True,
            budget=wait_budget(settings),
        )
    except GatewayError as exc:  # the file alone is wrong: its problems, as the build's
        return GatewayReport(problems=exc.problems)
    finally:
        if engine is not None:
            engine.dispose()
        close_upstreams()  # stdio upstreams: let the children exit


def _show(report: GatewayReport, *, as_json: bool) -> None:
    tools = [
        {
            "tool": exposed_name(action),
            "kind": action.kind,
            "contract_version": report.versions.get(action.name, action.contract_version),
        }
        for action in report.actions
    ]
    if as_json:
        print_json(
            {
                "tools": tools,
                "undeclared": report.undeclared,
                "warnings": report.warnings,
                "problems": report.problems,
            }
        )
    else:
        print_table(
            ["tool the agent sees", "kind", "contract_version"],
            [[t["tool"], t["kind"], t["contract_version"]] for t in tools],
        )
        for namespace, names in sorted(report.undeclared.items()):
            echo(f"not exposed (undeclared) in {namespace}: {', '.join(names)}")
        for warning in report.warnings:
            echo(f"warning: {warning}")
        for problem in report.problems:
            echo(f"problem: {problem}", err=True)
    if report.problems:
        raise typer.Exit(1)


@app.command("check")
def check(file: FileOption = None, as_json: JsonOption = False) -> None:
    """Read every upstream's tools and check the declarations; exit 1 naming each problem
    (a declared tool the upstream lacks, a bad template, a missing money path...)."""
    _show(_build(file, record=False), as_json=as_json)


@app.command("reload")
def reload(file: FileOption = None, as_json: JsonOption = False) -> None:
    """Re-read every upstream's tools and record the contract_version of each write tool
    (a changed schema gets the next version, so approvals of the older one stop counting).
    Running processes refuse the changed tools until they are restarted."""
    _show(_build(file, record=True), as_json=as_json)


app.command("import-openapi")(import_openapi)  # service/cli/gateway_openapi.py
