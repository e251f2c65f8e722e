"""Approver commands: review drafts, sign approvals and rejections, request execution.

``approve`` never signs what it has not checked: it recomputes the params
digest from the params the server showed and refuses if the server's
statement does not match them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from service.approvals.schemas import Decision, signed_request, statement_for
from service.canonical import canonical_json, params_sha256
from service.cli import passphrase
from service.cli.batch import approve_batch
from service.cli.client import ApiClient, ApiProblem, ApiUrlOption, TokenOption
from service.cli.common import JsonOption, echo, echo_text, fail, print_json, print_table
from service.cli.passphrase import unlock
from service.signing import key_id_for, public_key_b64
from service.sql import rfc3339_seconds, utcnow

drafts_app = typer.Typer(help="Review drafts.", no_args_is_help=True)
executions_app = typer.Typer(help="Inspect executions.", no_args_is_help=True)

KeyOption = Annotated[
    Path,
    typer.Option(
        "--key",
        help="Your Ed25519 private key (PKCS#8 PEM); if encrypted, the passphrase is "
        "DRAFTGATE_KEY_PASSPHRASE or asked for.",
    ),
]
YesOption = Annotated[
    bool,
    typer.Option(
        "--yes",
        help='Sign without asking "Sign this … of revision N? [y/N]" (for scripts; without '
        "a terminal and without --yes nothing is signed, exit 2).",
    ),
]
# What the signature binds and we can check ourselves (the approver is who the token is).
BOUND_FIELDS = ("tenant", "draft_id", "revision", "action", "contract_version", "params_sha256")


@drafts_app.command("list")
def list_drafts(
    status: Annotated[str | None, typer.Option(help="proposed, approved, … ")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action.")] = None,
    limit: Annotated[int, typer.Option(help="Page size (1-100).")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Continue from a previous page.")] = None,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """List drafts of your tenant, newest first."""
    page = _call(
        lambda api: api.get("/v1/drafts", status=status, action=action, limit=limit, cursor=cursor),
        api_url,
        token,
    )
    if as_json:
        print_json(page)
        return
    print_table(
        ["draft", "status", "action", "amount", "approvals", "risk", "summary"],
        [
            [
                d["draft_id"],
                d["status"],
                d["action"],
                (d.get("amount") or {}).get("display", ""),
                f"{d['approvals']['received']}/{d['approvals']['required']}",
                d["risk"],
                d["summary"],
            ]
            for d in page["drafts"]
        ],
    )
    if page.get("next_cursor"):
        echo(f"more: --cursor {page['next_cursor']}")


@drafts_app.command("show")
def show_draft(
    draft_id: str,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show one draft: summary, exact params, policy, approvals."""
    draft = _call(lambda api: api.get(f"/v1/drafts/{draft_id}"), api_url, token)
    if as_json:
        print_json(draft)
    else:
        _render(draft)


WaitOption = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Follow the execution to its end; exit 1 unless it succeeded.",
    ),
]
WaitTimeoutOption = Annotated[
    float, typer.Option("--timeout", min=1, help="With --wait: give up after this many seconds.")
]
FINAL_EXECUTION_STATUSES = frozenset({"succeeded", "failed", "expired"})
POLL_SECONDS = 0.2


def approve(
    draft_ids: Annotated[
        list[str], typer.Argument(help="The draft; with --batch, several.", metavar="DRAFT_ID…")
    ],
    key: KeyOption,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            help="Sign one approval of all the drafts named, with their totals (all or "
            "nothing: if one no longer matches, none counts).",
        ),
    ] = False,
    execute: Annotated[
        bool, typer.Option("--execute", help="Request execution once approved.")
    ] = False,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = 120,
    yes: YesOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Sign an approval of the draft's current revision (after checking what you sign)."""
    api = ApiClient.from_options(api_url, token)
    if batch:
        result = approve_batch(api, draft_ids, key, yes=yes, confirm=confirm, call=checked_call)
        for item in result["drafts"]:
            echo(
                f"approved {item['draft_id']}: draft is {item['status']} "
                f"({item['approvals_received']} of {item['approvals_required']} approvals)"
            )
        if execute:
            for item in result["drafts"]:
                if item["status"] == "approved":
                    _request_execution(api, item["draft_id"], wait=timeout if wait else None)
        return
    if len(draft_ids) != 1:
        fail("name one draft, or several with --batch")
    draft_id = draft_ids[0]
    draft = _decide(api, draft_id, key, Decision.APPROVE, reason=None, yes=yes)
    echo(
        f"approved revision {draft['revision']}: draft is {draft['status']} "
        f"({_progress(draft.get('progress'))})"
    )
    if execute:
        if draft["status"] != "approved":
            echo("not executing yet: the policy needs more approvals")
            return
        _request_execution(api, draft_id, wait=timeout if wait else None)


def reject(
    draft_id: str,
    key: KeyOption,
    reason: Annotated[str, typer.Option(help="Why; the agent relays it to the user.")],
    yes: YesOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Sign a rejection; one valid rejection ends the draft."""
    api = ApiClient.from_options(api_url, token)
    draft = _decide(api, draft_id, key, Decision.REJECT, reason=reason, yes=yes)
    echo(f"rejected: draft is {draft['status']}")


def execute(
    draft_id: str,
    wait: WaitOption = False,
    timeout: WaitTimeoutOption = 120,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Request execution of an approved draft (repeating it returns the same execution)."""
    _request_execution(
        ApiClient.from_options(api_url, token), draft_id, wait=timeout if wait else None
    )


@executions_app.command("show")
def show_execution(
    execution_id: str,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show an execution: status, attempts, outcome or error."""
    execution = _call(lambda api: api.get(f"/v1/executions/{execution_id}"), api_url, token)
    if as_json:
        print_json(execution)
        return
    echo(
        f"execution {execution['execution_id']} of draft {execution['draft_id']} "
        f"(revision {execution['revision']}, {execution['action']}): {execution['status']}"
    )
    for attempt in execution["attempts"]:
        detail = (attempt.get("detail") or {}).get("message") or (attempt.get("detail") or {}).get(
            "summary", ""
        )
        echo(f"  attempt {attempt['number']}: {attempt['result']} {detail}")
    if execution.get("outcome"):
        echo(f"outcome: {execution['outcome'].get('summary')}")
    if execution.get("error"):
        echo(f"error: {execution['error'].get('message')}")


NOT_ASKED_EXIT_CODE = 2  # a usage error, as click's: the command line lacks --yes


def confirm(question: str) -> None:
    """Ask the person at the terminal before signing. Without one, nobody can answer (and
    whatever feeds stdin must not): say how to confirm instead, having signed nothing."""
    if not passphrase.at_a_terminal():
        echo(
            f'error: not signed: "{question}" needs an answer and stdin is not a terminal; '
            "run it at a terminal, or pass --yes to sign without being asked",
            err=True,
        )
        raise typer.Exit(code=NOT_ASKED_EXIT_CODE)
    if not typer.confirm(question):
        echo("not signed: you answered no", err=True)
        raise typer.Exit(code=1)


def _decide(
    api: ApiClient,
    draft_id: str,
    key_file: Path,
    decision: Decision,
    *,
    reason: str | None,
    yes: bool,
) -> Any:
    try:  # before anything is fetched: a key that cannot be used must not cost a round trip
        private_key = unlock(key_file)
    except (OSError, ValueError) as exc:
        fail(f"cannot use {key_file}: {exc}")
    draft = checked_call(lambda: api.get(f"/v1/drafts/{draft_id}"))
    if draft.get("draft_id") != draft_id:
        fail(
            f"refusing to sign: asked for draft_id {draft_id}, the server answered with "
            f"draft_id {draft.get('draft_id')}"
        )
    _render(draft)
    offered = draft.get("statement_to_sign")
    if not offered:
        fail(f"the draft is {draft['status']}; it does not accept decisions")
    digest = params_sha256(draft["params"])
    ours = statement_for(
        draft,
        decision=decision,
        approver=offered["approver"],
        key_id=key_id_for(public_key_b64(private_key)),
        issued_at=rfc3339_seconds(utcnow()),
        reason=reason,
        params_sha256=digest,
    )
    mismatched = [name for name in BOUND_FIELDS if offered.get(name) != ours[name]]
    if digest != draft["params_sha256"]:
        mismatched.append("params_sha256 (of the params shown)")
    if mismatched:
        fail(
            "refusing to sign: the server's statement does not match the draft it showed "
            f"({', '.join(mismatched)})"
        )
    api.report_view(draft)  # what is signed now was on the terminal from here on
    if not yes:
        confirm(f"Sign this {decision.value} of revision {draft['revision']}?")
    body = signed_request(ours, private_key)
    return checked_call(lambda: api.post(f"/v1/drafts/{draft_id}/approvals", body))


def _request_execution(api: ApiClient, draft_id: str, *, wait: float | None) -> None:
    """Request the execution; with ``wait`` (seconds), follow it until it ends."""
    accepted = checked_call(lambda: api.post(f"/v1/drafts/{draft_id}/execute"))
    execution_id, status = accepted["execution_id"], accepted["status"]
    echo(f"execution {execution_id}: {status}")
    if wait is None:
        return
    deadline = time.monotonic() + wait
    while True:
        execution = checked_call(lambda: api.get(f"/v1/executions/{execution_id}"))
        if execution["status"] != status:
            status = execution["status"]
            echo(f"execution {execution_id}: {status}")
        if status in FINAL_EXECUTION_STATUSES:
            break
        if time.monotonic() > deadline:
            fail(f"execution {execution_id} is still {status} after {wait:g} s")
        time.sleep(POLL_SECONDS)
    if execution.get("outcome"):
        echo(f"outcome: {execution['outcome'].get('summary')}")
    if status != "succeeded":
        fail(f"execution {execution_id} {status}: {(execution.get('error') or {}).get('message')}")


def _render(draft: dict[str, Any]) -> None:
    echo(
        f"draft {draft['draft_id']} — {draft['action']} revision {draft['revision']} "
        f"[{draft['status']}]"
    )
    echo_text("", draft["summary"], name="summary")
    if draft.get("status_reason"):
        echo_text("reason: ", draft["status_reason"])
    echo(
        f"  proposed by {draft['proposed_by']['agent']} for "
        f"{draft['proposed_by']['on_behalf_of']}; risk {draft['risk']}; "
        f"expires {draft['expires_at']}"
    )
    echo(f"  policy: {draft['policy'].get('rule')}")
    echo(f"  params: {canonical_json(draft['params']).decode()}")
    for path, text in _multiline_leaves(draft["params"]):
        echo_text(f"{path}: ", text, indent="    ")
    echo(f"  params_sha256: {draft['params_sha256']}")
    _render_source(draft.get("source"))
    progress = draft.get("progress") or {}
    approvers = ", ".join(progress.get("approvers") or []) or "none"
    echo(f"  approvals: {_progress(progress)}; counted: {approvers}")
    for approval in draft["approvals"]:
        counted = "counts" if approval["counts"] else f"does not count ({approval['problem']})"
        echo(
            f"  {approval['decision']} by {approval['approver']} rev {approval['revision']}"
            f" — {counted}"
        )
        if approval.get("reason"):
            echo_text("reason: ", approval["reason"], indent="    ")


def _render_source(source: dict[str, Any] | None) -> None:
    """The record the draft changes, as proposed and (where it differs) as it is now: what
    an approval binds (docs/approvals.md, "Source-bound approvals")."""
    if not source:
        return
    moved = "; CHANGED since it was proposed" if source["moved"] else ""
    echo(f"  source: {source['ref']} at revision {source['revision']}{moved}")
    for fact in source["facts"]:
        now = "" if fact.get("now") is None else f"  (now: {fact['now']})"
        echo(f"    {fact['label']}: {fact['value']}{now}")
    for other in source["others"]:
        amount = f" {other['amount']['display']}" if other.get("amount") else ""
        echo(f"    also pending on it: {other['draft_id']} [{other['status']}]{amount}")
    hidden = source.get("others_count", 0) - len(source["others"])
    if hidden > 0:
        echo(f"    and {hidden} more pending on it (counted in the total)")
    if source.get("total"):
        limit = f"; allowed now: {source['limit']['display']}" if source.get("limit") else ""
        echo(f"    together: {source['total']['display']}{limit}")
    if source.get("warning"):
        echo(f"  WARNING: {source['warning']}")


def _multiline_leaves(value: Any, path: str = "") -> list[tuple[str, str]]:
    """The params' strings that hold several lines, by where they are (``note``,
    ``lines[1]``): the JSON above shows them escaped, these show them as written."""
    if isinstance(value, str):
        return [(path or "(value)", value)] if "\n" in value else []
    if isinstance(value, dict):
        items = [(f"{path}.{key}" if path else str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{index}]", item) for index, item in enumerate(value)]
    else:
        return []
    return [leaf for where, item in items for leaf in _multiline_leaves(item, where)]


def _progress(progress: dict[str, Any] | None) -> str:
    """The server's approval count (the execute gate's) as it answered it, never recounted."""
    if not progress:
        return "approval progress not reported by the server"
    return f"{progress['received']} of {progress['required']} approvals"


def _call(request: Any, api_url: str | None, token: str | None) -> Any:
    api = ApiClient.from_options(api_url, token)
    return checked_call(lambda: request(api))


def checked_call(request: Any) -> Any:
    try:
        return request()
    except ApiProblem as problem:
        fail(
            f"{problem.body.get('code', problem.status)}: "
            f"{problem.body.get('detail') or problem.body.get('message') or problem.body}"
        )
