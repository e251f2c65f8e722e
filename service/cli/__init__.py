"""The ``draftgate`` command: operators, approvers and auditors at a terminal."""

from __future__ import annotations

import typer

from service.cli import approver, audit, dev, keys, serve, tokens

app = typer.Typer(
    name="draftgate",
    help="Let AI agents propose writes; let people approve them; run them exactly once.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(tokens.app, name="tokens")
app.add_typer(audit.app, name="audit")
app.add_typer(serve.app, name="serve")
app.add_typer(keys.app, name="keys")
app.add_typer(approver.drafts_app, name="drafts")
app.add_typer(approver.executions_app, name="executions")
app.command("approve")(approver.approve)
app.command("reject")(approver.reject)
app.command("execute")(approver.execute)
app.command("trace")(audit.trace)
app.command("migrate")(serve.migrate)
app.command("dev")(dev.dev)


def main() -> None:
    app()
