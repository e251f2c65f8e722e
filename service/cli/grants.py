"""``draftgate grants``: sign a standing grant (after reading it in words), list and revoke
grants, through the API with your approver token. Like ``approve``, ``create`` never signs
what it did not ask for: the server writes the statement out, and it is checked against the
terms on the command line before it is signed with your key."""

from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from service.approvals.schemas import signed_request
from service.cli.approver import KeyOption, YesOption, checked_call, confirm
from service.cli.client import ApiClient, ApiUrlOption, TokenOption
from service.cli.common import JsonOption, echo, fail, print_json, print_table
from service.cli.passphrase import unlock
from service.money import major_to_minor
from service.signing import key_id_for, public_key_b64

app = typer.Typer(help="Sign, list and revoke standing grants.", no_args_is_help=True)

UNITS = {"s": 1, "m": 60, "min": 60, "h": 3_600, "d": 86_400}


def seconds_of(text: str) -> int:
    """ "24h", "7d", "90m", "3600s" (or a bare number of seconds) in seconds."""
    match = re.fullmatch(r"\s*(\d{1,7})\s*(s|m|min|h|d)?\s*", text)
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a duration such as 24h, 7d or 90m")
    return int(match.group(1)) * UNITS[match.group(2) or "s"]


def minor(amount: str | None, currency: str, what: str) -> int | None:
    if amount is None:
        return None
    try:
        return major_to_minor(amount, currency)
    except ValueError as exc:
        raise typer.BadParameter(f"{what}: {exc}") from None


@app.command("create")
def create(
    action: Annotated[str, typer.Option(help="The write action it covers, e.g. refund.")],
    key: KeyOption,
    for_: Annotated[str, typer.Option("--for", help="How long it stands: 24h, 7d…")],
    max_amount: Annotated[
        str | None, typer.Option("--max", help='The most one draft may move, "20.00".')
    ] = None,
    currency: Annotated[str, typer.Option(help="The currency of the amounts.")] = "USD",
    cap: Annotated[
        str | None, typer.Option(help="The most its drafts may add up to per --cap-window.")
    ] = None,
    cap_window: Annotated[str, typer.Option(help="The cap's window: 24h, 7d…")] = "24h",
    source: Annotated[
        str | None, typer.Option(help='Only drafts on this source, e.g. "order:ORD-1004".')
    ] = None,
    agent: Annotated[str | None, typer.Option(help="Only drafts this agent proposed.")] = None,
    uses: Annotated[int | None, typer.Option(help="The most drafts it may cover.")] = None,
    yes: YesOption = False,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Sign a standing grant: drafts of one action within these limits count your approval."""
    try:  # before anything is asked: a key that cannot be used must not cost a round trip
        private_key = unlock(key)
    except (OSError, ValueError) as exc:
        fail(f"cannot use {key}: {exc}")
    terms: dict[str, Any] = {
        "action": action,
        "duration_seconds": seconds_of(for_),
        "max_amount_minor": minor(max_amount, currency, "--max"),
        "cap_minor": minor(cap, currency, "--cap"),
        "cap_window_seconds": seconds_of(cap_window) if cap is not None else None,
        "source_ref": source,
        "agent": agent,
        "max_uses": uses,
    }
    if max_amount is not None or cap is not None:
        terms["currency"] = currency
    asked = {name: value for name, value in terms.items() if value is not None}
    api = ApiClient.from_options(api_url, token)
    offered = checked_call(lambda: api.post("/v1/grants/statement", asked))
    statement = {**offered["statement"], "key_id": key_id_for(public_key_b64(private_key))}
    check_offer(asked, statement)
    echo(f"grant: {offered['words']}")
    if not yes:
        confirm("Sign this grant?")
    created = checked_call(lambda: api.post("/v1/grants", signed_request(statement, private_key)))
    if as_json:
        print_json(created)
        return
    echo(f"granted {created['grant_id']}: {created['words']}")


def check_offer(asked: dict[str, Any], statement: dict[str, Any]) -> None:
    """Refuse to sign a statement that says more or other than the terms asked for."""
    limits = {name: value for name, value in asked.items() if name != "duration_seconds"}
    mismatched = [name for name, value in limits.items() if statement.get(name) != value]
    signed_limits = set(statement) - {
        "type",
        "tenant",
        "approver",
        "key_id",
        "not_before",
        "expires_at",
        "issued_at",
    }
    mismatched += sorted(signed_limits - set(limits))
    if mismatched:
        fail(
            "refusing to sign: the server's statement differs from the terms asked "
            f"({', '.join(mismatched)})"
        )


@app.command("list")
def list_grants(
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """List your tenant's grants, newest first: status, uses, and what each allows."""
    listed = checked_call(lambda: ApiClient.from_options(api_url, token).get("/v1/grants"))
    if as_json:
        print_json(listed)
        return
    print_table(
        ["grant", "status", "approver", "uses", "allows"],
        [
            [g["grant_id"], g["status"], g["approver"], g["uses"], g["words"]]
            for g in listed["grants"]
        ],
    )


@app.command("revoke")
def revoke(
    grant_id: Annotated[str, typer.Argument(help="grt_…")],
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Revoke a grant now: it covers nothing more, and what it covered does not run on it."""
    api = ApiClient.from_options(api_url, token)
    revoked = checked_call(lambda: api.post(f"/v1/grants/{grant_id}/revoke", {}))
    echo(f"revoked {revoked['grant_id']} ({revoked['uses']} drafts covered)")
