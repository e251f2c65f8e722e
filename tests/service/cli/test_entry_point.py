"""The installed ``draftgate`` command, and its subcommands imported only when used.

The other CLI tests run the commands in-process; these prove the real wiring (the console
script, a real database, a fresh interpreter) and that loading subcommands lazily changes
nothing anyone can see: every help text and error is what eager registration printed.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer
import typer.main
from typer.testing import CliRunner

from service.cli import SUBCOMMANDS, app, load
from tests.support import cli

DRAFTGATE = Path(sys.executable).parent / "draftgate"
# What the subcommand modules import and `draftgate --help` must not (it took seconds).
HEAVY = ("service.cli.", "sqlalchemy", "sqlmodel", "alembic", "httpx", "celery", "fastapi")


def installed(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("DRAFTGATE_")}
    return subprocess.run(
        [str(DRAFTGATE), *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def eager_app() -> typer.Typer:
    """draftgate as it was before its subcommands loaded lazily: every module imported and
    registered on one app."""
    eager = typer.Typer(
        name="draftgate", help=app.info.help, no_args_is_help=True, pretty_exceptions_enable=False
    )
    for name, (target, _) in SUBCOMMANDS.items():
        module, attribute = target.split(":")
        command = getattr(importlib.import_module(module), attribute)
        if isinstance(command, typer.Typer):
            eager.add_typer(command, name=name)
        else:
            eager.command(name)(command)
    return eager


def command_paths(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, subcommand in getattr(command, "commands", {}).items():
        found += command_paths(subcommand, (*path, name))
    return found


def printed(application: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(application, list(args), prog_name="draftgate")
    return result.exit_code, result.stdout, result.stderr


def test_the_installed_command_issues_and_lists_a_token(runtime):
    env = cli.operator_env(runtime, DRAFTGATE_DEFAULT_TENANT="acme")

    issued = installed(
        "tokens", "issue", "--subject", "bot", "--role", "auditor", "--json", env=env
    )
    listed = installed("tokens", "list", "--json", env=env)

    assert issued.returncode == 0, issued.stderr
    token = json.loads(issued.stdout)
    assert token["token"].startswith("dg_")
    assert listed.returncode == 0, listed.stderr
    assert [row["token_id"] for row in json.loads(listed.stdout)] == [token["token_id"]]
    assert token["token"] not in listed.stdout


def test_the_installed_help_lists_every_subcommand_as_the_app_does():
    result = installed("--help")

    assert result.returncode == 0, result.stderr
    assert result.stdout == printed(app, "--help")[1]
    for name in SUBCOMMANDS:
        assert f" {name} " in result.stdout, name


def test_help_imports_no_subcommand_module():
    code = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from service.cli import app\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr
    assert [m for m in json.loads(result.stdout) if m.startswith(HEAVY)] == []


def test_each_listed_line_of_help_is_the_subcommands_own():
    for name, (_, line) in SUBCOMMANDS.items():
        assert load(name).help == line, f"SUBCOMMANDS[{name!r}] differs from its command's help"


def test_every_help_and_usage_error_is_what_eager_registration_printed():
    eager = eager_app()
    paths = command_paths(typer.main.get_command(eager))
    assert len(paths) > len(SUBCOMMANDS)  # every group's own commands too

    for path in paths:
        assert printed(app, *path, "--help") == printed(eager, *path, "--help"), path
    for args in ([], ["tokenz"], ["tokens"], ["tokens", "issu"], ["approve"], ["trace", "-x"]):
        assert printed(app, *args) == printed(eager, *args), args
