"""``draftgate webhooks``: add, list, remove and test outgoing webhooks, as an admin, through the
API (an admin bearer token, no database access)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from service.cli.approver import checked_call
from service.cli.client import ApiClient, ApiUrlOption, TokenOption
from service.cli.common import JsonOption, echo, print_json, print_table

app = typer.Typer(
    help="Add, list, remove and test outgoing webhooks (admins, through the API).",
    no_args_is_help=True,
)

EVENTS_HELP = (
    "An event to subscribe to (repeat it): draft.proposed, draft.approved, draft.rejected, "
    "draft.expired, draft.escalated, execution.succeeded, execution.failed. Default: all of them."
)
ALL_EVENTS = [
    "draft.proposed",
    "draft.approved",
    "draft.rejected",
    "draft.expired",
    "draft.escalated",
    "execution.succeeded",
    "execution.failed",
]


@app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="https:// URL of the receiver.")],
    event: Annotated[list[str] | None, typer.Option("--event", help=EVENTS_HELP)] = None,
    description: Annotated[str, typer.Option(help="A note to recognise it by.")] = "",
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Add an endpoint. Its signing secret is printed once: give it to the receiver."""
    api = ApiClient.from_options(api_url, token)
    body = {"url": url, "events": event or ALL_EVENTS, "description": description}
    created = checked_call(lambda: api.post("/v1/webhooks", body))
    if as_json:
        print_json(created)
        return
    echo(f"webhook id: {created['endpoint_id']}")
    echo(f"events:     {', '.join(created['events'])}")
    echo(f"secret:     {created['secret']}")
    echo("Store the secret now (it verifies every delivery): it cannot be shown again.", err=True)


@app.command("list")
def list_webhooks(
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """List the tenant's webhooks (never their secrets)."""
    api = ApiClient.from_options(api_url, token)
    listed = checked_call(lambda: api.get("/v1/webhooks"))
    if as_json:
        print_json(listed)
        return
    print_table(
        ["webhook", "url", "events", "description", "created"],
        [
            [e["endpoint_id"], e["url"], ",".join(e["events"]), e["description"], e["created_at"]]
            for e in listed["endpoints"]
        ],
    )


@app.command("remove")
def remove(
    endpoint_id: str,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Remove a webhook: nothing more is sent to it."""
    api = ApiClient.from_options(api_url, token)
    removed = checked_call(lambda: api.request("DELETE", f"/v1/webhooks/{endpoint_id}"))
    echo(f"removed {removed['endpoint_id']} ({removed['url']})")


@app.command("test")
def send_test(
    endpoint_id: str,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Send a webhook.test ping (the worker delivers it; see `webhooks deliveries`)."""
    api = ApiClient.from_options(api_url, token)
    queued = checked_call(lambda: api.post(f"/v1/webhooks/{endpoint_id}/test"))
    if as_json:
        print_json(queued)
        return
    echo(f"ping {queued['delivery_id']}: {queued['status']}")


@app.command("deliveries")
def deliveries(
    endpoint_id: str,
    limit: Annotated[int, typer.Option(help="How many, newest first (1-100).")] = 20,
    as_json: JsonOption = False,
    api_url: str | None = ApiUrlOption,
    token: str | None = TokenOption,
) -> None:
    """Show a webhook's delivery log: each delivery and its attempts."""
    api = ApiClient.from_options(api_url, token)
    log = checked_call(lambda: api.get(f"/v1/webhooks/{endpoint_id}/deliveries", limit=limit))
    if as_json:
        print_json(log)
        return
    print_table(
        ["delivery", "event", "status", "attempts", "last"],
        [
            [d["delivery_id"], d["event_type"], d["status"], len(d["attempts"]), _last(d)]
            for d in log["deliveries"]
        ],
    )


def _last(delivery: dict[str, Any]) -> str:
    if not delivery["attempts"]:
        return ""
    last = delivery["attempts"][-1]
    outcome = last["status_code"] if last["status_code"] is not None else last["error"]
    return f"{outcome} in {last['latency_ms']} ms"
