"""``draftgate doctor``: can this component do its job? For operators and healthchecks.

The checks live in ``service.health``; this prints them and exits 1 if any is not ok, so a
container healthcheck (compose.yaml) or a script can run it as it is.
"""

from __future__ import annotations

from typing import Annotated

import typer

from service.cli.common import JsonOption, print_json, print_table
from service.config import get_settings
from service.health import OK, Component
from service.health import doctor as checks_for


def doctor(
    component: Annotated[
        Component | None,
        typer.Option(help="Check what this component needs (default: the whole stack)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check database, schema, broker, keys and audit checkpoints; exit 1 if one fails."""
    checks = checks_for(get_settings(), component)
    failed = [name for name, status in checks.items() if status != OK]
    if as_json:
        print_json({"ok": not failed, "component": component, "checks": checks})
    else:
        print_table(["check", "status"], [[name, status] for name, status in checks.items()])
        typer.echo(f"{len(failed)} of {len(checks)} checks failed" if failed else "all ok")
    if failed:
        raise typer.Exit(code=1)
