"""``draftgate audit`` and ``draftgate trace``: query, export and verify the audit log.

Auditors work through the API with their token (no database access needed);
``verify --file`` needs nothing at all but the export; operators with database
access can verify, checkpoint and manage the checkpoint key directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer

from service.audit import actions as audit
from service.audit import checkpoints
from service.audit.health import anchoring_problem
from service.audit.offline import (
    ExportError,
    Verdict,
    read_checkpoints,
    read_trust_file,
    trust_document,
    unanchored_reason,
    verdict,
    verify_export,
)
from service.audit.verification import Verification
from service.cli.approver import checked_call
from service.cli.client import ApiClient, ApiUrlOption, TokenOption
from service.cli.common import (
    JsonOption,
    TenantOption,
    echo,
    fail,
    print_json,
    print_table,
    runtime,
    tenant_or_default,
)
from service.cli.progress import bytes_progress
from service.config import get_settings
from service.db import read_scope, session_scope
from service.errors import DomainError
from service.signing import key_id_for, parse_public_key, public_key_b64
from service.sql import utcnow
from service.text import inert

app = typer.Typer(help="Query, export and verify the audit log.", no_args_is_help=True)


@app.command("events")
def events(
    type: Annotated[str | None, typer.Option("--type", help="e.g. tool.refused")] = None,
    actor: Annotated[str | None, typer.Option(help="e.g. agent:support-agent")] = None,
    draft_id: Annotated[str | None, typer.Option("--draft", help="Draft id.")] = None,
    execution_id: Annotated[str | None, typer.Option("--execution", help="Execution id.")] = None,
    trace_id: Annotated[str | None, typer.Option("--trace", help="Trace id.")] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339, e.g. 2026-11-30T00:00:00Z")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339 (exclusive)")] = None,
    limit: Annotated[int, typer.Option(help="Events per page (1-500).")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Continue after a previous page.")] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Whole times and details, not shortened.")
    ] = False,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """List audit events as a readable table (auditor token)."""
    api = ApiClient.from_options(api_url, token)
    page = checked_call(
        lambda: api.get(
            "/v1/audit/events",
            type=type,
            actor=actor,
            draft_id=draft_id,
            execution_id=execution_id,
            trace_id=trace_id,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )
    )
    if as_json:
        print_json(page)
        return
    print_table(
        ["seq", "at", "type", "actor", "draft", "trace", "detail"],
        [
            [
                e["seq"],
                e["at"] if full else e["at"][:19],
                e["type"],
                e["actor"],
                e["draft_id"] or "",
                e["trace_id"] or "",  # whole: `draftgate trace` takes what is copied here
                _detail(e, limit=None if full else DETAIL_WIDTH),
            ]
            for e in page["events"]
        ],
    )
    if page.get("next_cursor"):
        echo(f"more: --cursor {page['next_cursor']}")


@app.command("export")
def export(
    out: Annotated[Path, typer.Option("--out", help="Where to write the NDJSON export.")],
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Download the whole log of your tenant as NDJSON (streamed; any size)."""
    api = ApiClient.from_options(api_url, token)
    count = 0
    with (
        httpx.stream(
            "GET",
            f"{api.base_url}/v1/audit/export",
            headers={"Authorization": f"Bearer {api.token}"},
            timeout=httpx.Timeout(30.0, read=300.0),  # long exports stream; a stall fails
        ) as response,
    ):
        if response.status_code != 200:
            response.read()
            fail(f"export refused: {response.status_code} {response.text}")
        with (
            out.open("w", encoding="utf-8") as sink,
            bytes_progress(f"exporting to {out.name}", total=None) as advance,
        ):
            for line in response.iter_lines():
                if line:
                    sink.write(line + "\n")
                    count += 1
                    advance(len(line) + 1)
    typer.echo(f"exported {count} events to {out}")


@app.command("checkpoints")
def download_checkpoints(
    out: Annotated[Path, typer.Option("--out", help="Where to write the checkpoints JSON.")],
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Download the signed checkpoints (for `audit verify --file … --checkpoints …`)."""
    api = ApiClient.from_options(api_url, token)
    document = checked_call(lambda: api.get("/v1/audit/checkpoints"))
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    typer.echo(f"{len(document['checkpoints'])} checkpoints, key {document['key_id']} -> {out}")


@app.command("verify")
def verify(
    file: Annotated[
        Path | None, typer.Option("--file", help="Verify this NDJSON export offline.")
    ] = None,
    checkpoints_file: Annotated[
        Path | None, typer.Option("--checkpoints", help="Signed checkpoints JSON to check against.")
    ] = None,
    public_key: Annotated[
        str | None, typer.Option(help="With --file: the checkpoint public key you pin.")
    ] = None,
    trust_file: Annotated[
        Path | None,
        typer.Option(help="With --file: the pinned key, from `audit checkpoint-key --json`."),
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Verify the hash chain: offline (--file, with a pinned key), through the API (with a
    token), or, for operators, straight from the database. Exit 1 naming the first bad seq if
    tampered; offline also 2 if it cannot verify and 3 if no checkpoint covers the tail."""
    if file is not None:
        pinned = _pinned_key(public_key, trust_file)
        result = _verify_file(file, checkpoints_file, pinned)
        _print_verdict(result, as_json, offline=True)
        raise typer.Exit(code=int(verdict(result)))
    if token or os.environ.get("DRAFTGATE_TOKEN"):
        api = ApiClient.from_options(api_url, token)
        report = checked_call(lambda: api.get("/v1/audit/verify"))
        result = Verification(
            report["ok"],
            report["events_checked"],
            report["head"]["seq"],
            report["head"]["hash"],
            report["first_bad_seq"],
            report.get("problem"),
            report.get("checkpoints_checked", 0),
            anchored_seq=report.get("anchored_seq", 0),
            checkpoint_problem=report.get("checkpoint_problem"),
        )
    else:
        with runtime() as rt, read_scope(rt.engine) as session:
            name = tenant_or_default(tenant)
            result = audit.verify(
                session, name, checkpoint_public_key=checkpoints.trusted_public_key(rt.settings)
            )
            # As the API's verify does: flag a chain whose checkpoints are overdue.
            problem = anchoring_problem(session, rt.settings, name, now=utcnow())
            result = replace(result, checkpoint_problem=problem)
    _print_verdict(result, as_json, offline=False)
    if not result.ok:
        raise typer.Exit(code=int(Verdict.TAMPERED))


@app.command("checkpoint")
def make_checkpoint(tenant: TenantOption = None) -> None:
    """Sign the chain head now (operators; needs the checkpoint key file)."""
    with runtime() as rt:
        key = checkpoints.load_key(rt.settings.resolved_checkpoint_key_file())
        with session_scope(rt.engine) as session:
            created = checkpoints.create(session, key, now=utcnow(), tenant=tenant)
            rows = [[c.tenant, c.seq, c.hash[:16], c.key_id] for c in created]
    if not rows:
        typer.echo("nothing new to checkpoint")
    else:
        print_table(["tenant", "seq", "hash", "key"], rows)


@app.command("checkpoint-key")
def checkpoint_key(
    generate: Annotated[
        bool, typer.Option("--generate", help="Create the key if missing.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the trust file auditors pass to --trust-file.")
    ] = False,
) -> None:
    """Print the checkpoint public key auditors should pin (operators)."""
    path = get_settings().resolved_checkpoint_key_file()
    try:
        key = checkpoints.ensure_key(path) if generate else checkpoints.load_key(path)
    except DomainError as error:
        fail(error)
    public = public_key_b64(key)
    if as_json:
        print_json(trust_document(public))
        return
    typer.echo(f"key file:   {path}")
    typer.echo(f"public key: {public}")
    typer.echo(f"key id:     {key_id_for(public)}")


def trace(
    trace_id: str,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show one agent interaction as a timeline: tool calls, drafts, approvals, execution."""
    api = ApiClient.from_options(api_url, token)
    view = checked_call(lambda: api.get(f"/v1/traces/{trace_id}"))
    if as_json:
        print_json(view)
        return
    # Steps summarise what agents sent and got back: shown inert, like every line for people.
    echo(f"trace {view['trace_id']}")
    for draft in view["drafts"]:
        execution = draft.get("execution") or {}
        echo(
            f"  draft {draft['draft_id']} ({draft['action']}): {draft['status']}"
            + (f", execution {execution['status']}" if execution else "")
        )
    for step in view["steps"]:
        echo(f"  {step['at'][11:23]}  #{step['seq']:<6} {step['actor']:<26} {step['summary']}")
    echo(f"diagnosis: {view['diagnosis']}")


def _pinned_key(public_key: str | None, trust_file: Path | None) -> str:
    """The checkpoint public key the auditor pins; the checkpoints file's own is never it."""
    if public_key is not None and trust_file is not None:
        _cannot_verify("give --public-key or --trust-file, not both")
    if trust_file is not None:
        try:
            public_key = read_trust_file(trust_file.read_text(encoding="utf-8"))
        except (ExportError, OSError, UnicodeDecodeError) as exc:
            _cannot_verify(f"{trust_file}: {exc}")
    if public_key is None:
        _cannot_verify(
            "no pinned checkpoint key: pass --public-key <key> or --trust-file <file> "
            "(an operator prints it with `draftgate audit checkpoint-key --json`); "
            "the key inside a checkpoints file is never trusted"
        )
    try:
        parse_public_key(public_key)
    except ValueError as exc:
        _cannot_verify(f"--public-key is not a usable Ed25519 public key: {exc}")
    return public_key


def _counted(lines: Iterable[str], advance: Callable[[int], None]) -> Iterator[str]:
    for line in lines:
        advance(len(line.encode("utf-8")))
        yield line


def _verify_file(file: Path, checkpoints_file: Path | None, public_key: str) -> Verification:
    stored: list[dict[str, Any]] = []
    claimed_key: str | None = None
    try:
        if checkpoints_file is not None:
            stored, claimed_key = read_checkpoints(checkpoints_file.read_text(encoding="utf-8"))
        with (
            file.open(encoding="utf-8") as lines,
            bytes_progress(f"verifying {file.name}", total=file.stat().st_size) as advance,
        ):
            return verify_export(
                _counted(lines, advance),
                checkpoints=stored,
                checkpoint_public_key=public_key,
                claimed_public_key=claimed_key,
            )
    except (ExportError, OSError, ValueError) as exc:
        _cannot_verify(str(exc))


def _cannot_verify(message: str) -> NoReturn:
    typer.echo(inert(f"error: {message}"), err=True)  # may quote the files being verified
    raise typer.Exit(code=int(Verdict.CANNOT_VERIFY))


def _print_verdict(result: Verification, as_json: bool, *, offline: bool) -> None:
    unanchored = result.ok and not result.anchored
    if as_json:
        print_json(result.report())
    elif not result.ok:
        where = f"first bad seq {result.first_bad_seq}: " if result.first_bad_seq else ""
        verified = f" ({result.events_checked} events verified before it)" if where else ""
        typer.echo(inert(f"TAMPERED: {where}{result.problem}{verified}"), err=True)
    elif not (offline and unanchored):
        typer.echo(
            f"ok: {result.events_checked} events verify; head seq {result.head_seq} "
            f"hash {result.head_hash}; {result.checkpoints_checked} checkpoints agree"
            + (f"; anchored at seq {result.anchored_seq}" if result.anchored else "")
        )
    if offline and unanchored:
        typer.echo(unanchored_reason(result), err=True)  # exit 3: said even with --json
    elif unanchored and not as_json:
        # A live log is always a little ahead of its newest checkpoint, and the server's
        # head row vouches for the tail: a warning, not a failure (docs/audit.md).
        typer.echo(f"warning: {unanchored_reason(result)}", err=True)
    if result.checkpoint_problem and not as_json:  # e.g. overdue: checkpointing has stopped
        typer.echo(inert(f"warning: checkpoints: {result.checkpoint_problem}"), err=True)


DETAIL_WIDTH = 80


def _detail(event: dict[str, Any], *, limit: int | None) -> str:
    data = event["data"]
    error = data.get("error") or {}
    if error:
        return f"{error.get('code')}: {error.get('message', '')}"[:limit]
    return str(data.get("tool") or data.get("summary") or data.get("reason") or "")[:limit]
