"""The ``draftgate`` command: operators, approvers and auditors at a terminal."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # typer vendors click privately: its classes are named for types only
    from typer import _click as click

# Each subcommand: where it is defined, and the line of help `draftgate --help` lists for it.
# Their modules import sqlmodel, alembic, httpx… (seconds), so a module is imported only
# when one of its subcommands is used, and the listing cannot ask them for their help
# (tests/service/cli/test_entry_point.py keeps these lines equal to the commands' own).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "approve": (
        "service.cli.approver:approve",
        "Sign an approval of the draft's current revision (after checking what you sign).",
    ),
    "reject": (
        "service.cli.approver:reject",
        "Sign a rejection; one valid rejection ends the draft.",
    ),
    "narrow": (
        "service.cli.narrow:narrow",
        "Lower a draft's amount (or drop an optional effect) and approve what is left.",
    ),
    "execute": (
        "service.cli.approver:execute",
        "Request execution of an approved draft (repeating it returns the same execution).",
    ),
    "trace": (
        "service.cli.audit:trace",
        "Show one agent interaction as a timeline: tool calls, drafts, approvals, execution.",
    ),
    "migrate": (
        "service.cli.serve:migrate",
        "Bring the database schema up to date (Alembic; the only way the schema changes).",
    ),
    "doctor": (
        "service.cli.doctor:doctor",
        "Check database, schema, broker, keys and audit checkpoints; exit 1 if one fails.",
    ),
    "dev": (
        "service.cli.dev:dev",
        "Run API, MCP, worker and beat on SQLite; seed the demo; write <state-dir>/demo.json.",
    ),
    "tokens": ("service.cli.tokens:app", "Issue, revoke and list bearer tokens."),
    "audit": ("service.cli.audit:app", "Query, export and verify the audit log."),
    "serve": ("service.cli.serve:app", "Run one component of the stack."),
    "keys": ("service.cli.keys:app", "Generate, register, revoke and list approver keys."),
    "drafts": ("service.cli.approver:drafts_app", "Review drafts."),
    "executions": ("service.cli.approver:executions_app", "Inspect executions."),
    "webhooks": (
        "service.cli.webhooks:app",
        "Add, list, remove and test outgoing webhooks (admins, through the API).",
    ),
    "grants": ("service.cli.grants:app", "Sign, list and revoke standing grants."),
    "policies": (
        "service.cli.policies:app",
        "Try approval policies before switching them on.",
    ),
    "gateway": (
        "service.cli.gateway:app",
        "Check the gateway file against its upstreams, and re-read their catalogues.",
    ),
}


class Placeholder(TyperCommand):
    """A subcommand not imported yet: its name and line of help, enough to be listed in
    `draftgate --help` and suggested for a typo."""


class LazyGroup(TyperGroup):
    """A group that imports a subcommand's module when the subcommand is looked up."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = {
            name: Placeholder(name, help=line) for name, (_, line) in SUBCOMMANDS.items()
        }
        self._listing = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if isinstance(command, Placeholder) and not self._listing:
            command = self.commands[cmd_name] = load(cmd_name)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # typer lists the subcommands through get_command: let it see the placeholders, whose
        # help is all a listing shows, instead of importing every module.
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def load(name: str) -> click.Command:
    """The subcommand ``name``, built by typer exactly as if it had been registered eagerly."""
    module, attribute = SUBCOMMANDS[name][0].split(":")
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer()
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    return typer.main.get_group(holder).commands[name]


app = typer.Typer(
    name="draftgate",
    help="Let AI agents propose writes; let people approve them; run them exactly once.",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # typer builds a group only for an app with commands or a callback; the commands are
    # LazyGroup's, so the app has this (empty) callback.
    pass


def main() -> None:
    """The ``draftgate`` command. A gateway file that cannot be served stops any command
    that reads it (``serve *``, ``dev``) here, in one place: its problems, one line each
    (``<file>:<line>: <path>: <problem>``), on stderr, and exit status 2 (a usage error,
    as for a bad option), never a traceback."""
    from service.gateway.errors import GatewayError

    try:
        app()
    except GatewayError as refused:
        from service.text import inert

        for problem in refused.problems:
            sys.stderr.write(inert(problem) + "\n")
        raise SystemExit(2) from None
