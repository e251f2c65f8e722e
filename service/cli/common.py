"""Helpers shared by CLI commands: settings, the runtime, and printing for people.

Much of what the CLI prints was written by an agent (summaries, params, reasons), so every
line meant for a person goes through ``service.text.inert``: terminal escapes, bidi overrides
and invisible characters are shown as visible escapes, whatever let them into the data.
JSON output needs nothing more (``json.dump`` escapes every non-ASCII character).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from sqlmodel import Session

from service.config import Settings, get_settings
from service.db import session_scope
from service.errors import DomainError
from service.runtime import Runtime, build_runtime
from service.text import inert, inert_lines

OPERATOR = "operator:cli"
T = TypeVar("T")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
TenantOption = Annotated[
    str | None, typer.Option(help="Tenant (default: DRAFTGATE_DEFAULT_TENANT).")
]


def tenant_or_default(tenant: str | None) -> str:
    return tenant or get_settings().default_tenant


@contextmanager
def runtime() -> Iterator[Runtime]:
    """The runtime for one command; refusals exit 1, and its engine's connections are closed
    after (the command may run inside a longer-lived process, such as a test)."""
    rt = build_runtime(get_settings())
    try:
        yield rt
    except DomainError as error:
        fail(error)
    finally:
        rt.engine.dispose()


def check_runtime(settings: Settings) -> None:
    """Build the runtime once, and let it go. For a command that hands the start to another
    program (Celery, the children of ``dev``): a bad configuration stops it here, in its
    own process, where ``service.cli.main`` refuses a gateway file's problems with one line
    each and exit 2, instead of in a Celery signal handler that only logs the error."""
    from service.gateway.mcp import close_upstreams

    built = build_runtime(settings)
    built.engine.dispose()
    close_upstreams()  # the processes that serve open their own, after any fork


def as_operator(work: Callable[[Session], T]) -> T:
    """Run one unit of work straight on the database (operators only); refusals exit 1."""
    with runtime() as rt, session_scope(rt.engine) as session:
        return work(session)


def fail(error: DomainError | str) -> NoReturn:
    message = f"{error.code}: {error.message}" if isinstance(error, DomainError) else error
    # A message of several lines (a file's problems, one per line) is printed as lines, each
    # made inert: a server's message may quote what an agent wrote.
    first, *more = message.split("\n")
    echo(f"error: {first}", err=True)
    for line in more:
        echo(f"  | {line}", err=True)
    raise typer.Exit(code=1)


def echo(line: str, *, err: bool = False) -> None:
    """Print a line for a person, any unsafe character in it shown as an escape."""
    typer.echo(inert(line), err=err)


def echo_text(label: str, value: str, *, indent: str = "  ", name: str = "text") -> None:
    """``label`` and free text an agent or a person wrote. Several lines go under a visible
    gutter, each made inert, so that no line of it can pass for one of the CLI's own (a note
    "ok\nAmount: 0.01 USD" never prints a line that starts with ``Amount:``)."""
    if "\n" not in value:
        echo(f"{indent}{label}{value}")
        return
    heading = label.rstrip().rstrip(":") or name
    echo(f"{indent}{heading} ({value.count(chr(10)) + 1} lines):")
    for line in inert_lines(value):
        typer.echo(f"{indent}  {GUTTER} {line}")


GUTTER = "│"


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[inert(str(value if value is not None else "")) for value in row] for row in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    echo("  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in cells:
        echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
