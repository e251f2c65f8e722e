"""Acting as a person in the console: sign in through the form, read pages, post as its JS."""

from __future__ import annotations

from typing import Any

import httpx

from mcp_adapter.tools import ToolDoor
from service.tracing import new_trace_id
from tests.service.console.dom import Element, parse

CONSOLE_ORIGIN = "http://127.0.0.1:8000"
SAME_ORIGIN = {"Origin": CONSOLE_ORIGIN}


def same_origin(client: httpx.Client) -> dict[str, str]:
    """The Origin header a browser sends on the console's own POSTs."""
    return {"Origin": str(client.base_url).rstrip("/")}


def page(client: httpx.Client, path: str) -> Element:
    response = client.get(path)
    assert response.status_code == 200, response.text[:500]
    return parse(response.text)


def sign_in(client: httpx.Client, token: str, *, next_path: str | None = None) -> httpx.Response:
    """Fill in and submit the sign-in form as a browser would (same-origin POST)."""
    form = page(client, "/console/sign-in" + (f"?next={next_path}" if next_path else ""))
    fields = {
        e.attrs["name"]: e.attrs.get("value") or ""
        for e in form.find_all("input")
        if e.attrs.get("type") == "hidden"
    }
    return client.post(
        "/console/sign-in", data={**fields, "token": token}, headers=same_origin(client)
    )


def signed_in(client: httpx.Client, token: str) -> str:
    """Sign in; the session's CSRF token (from the inbox page's meta)."""
    response = sign_in(client, token)
    assert response.status_code == 303, response.text[:500]
    return csrf_of(client)


def csrf_of(client: httpx.Client, path: str = "/console/") -> str:
    [meta] = page(client, path).find_all("meta", name="csrf-token")
    token = meta.attrs["content"]
    assert token
    return token


def post_json(
    client: httpx.Client, path: str, body: Any, csrf: str | None, **headers: str
) -> httpx.Response:
    sent = {**same_origin(client), **headers}
    if csrf is not None:
        sent["X-CSRF-Token"] = csrf
    return client.post(path, json=body, headers=sent)


def propose(door: ToolDoor, amount_minor: int = 2_500, **extra: Any) -> dict[str, Any]:
    arguments = {
        "order_id": "ORD-1004",
        "amount": {"amount_minor": amount_minor, "currency": "USD"},
        "reason": "damaged",
        **extra,
    }
    return door.call("propose_refund", arguments, new_trace_id(), None)
