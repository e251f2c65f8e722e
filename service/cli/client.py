"""A small HTTP client for CLI commands that act as a person (approver, auditor) through the API."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import httpx
import typer

DEFAULT_API_URL = "http://127.0.0.1:8000"
TIMEOUT_SECONDS = 30


class ApiProblem(Exception):
    """A problem+json answer (or no answer) from the API."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        super().__init__(f"{body.get('code', status)}: {body.get('detail', body)}")


@dataclass(frozen=True)
class ApiClient:
    base_url: str
    token: str

    @classmethod
    def from_options(cls, api_url: str | None, token: str | None) -> ApiClient:
        url = api_url or os.environ.get("DRAFTGATE_API_URL") or DEFAULT_API_URL
        secret = token or os.environ.get("DRAFTGATE_TOKEN")
        if not secret:
            raise typer.BadParameter("pass --token or set DRAFTGATE_TOKEN to your bearer token")
        return cls(url.rstrip("/"), secret)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            response = httpx.request(
                method, self.base_url + path, headers=headers, timeout=TIMEOUT_SECONDS, **kwargs
            )
        except httpx.TransportError as exc:
            raise ApiProblem(0, {"code": "API_UNREACHABLE", "detail": str(exc)}) from None
        body = response.json() if response.content else {}
        if response.status_code >= 400:
            raise ApiProblem(response.status_code, body if isinstance(body, dict) else {})
        return body

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any | None = None) -> Any:
        return self.request("POST", path, json=body)

    def report_view(self, draft: dict[str, Any]) -> None:
        """Oversight (docs/metrics.md): the draft, its params and its source are on the
        terminal now. A measure, never a gate: a report that fails stops nothing."""
        if draft.get("status") != "proposed":
            return
        seen = ["params", "source"] if draft.get("source") else ["params"]
        body = {"revision": draft["revision"], "seen": seen}
        with contextlib.suppress(ApiProblem):
            self.post(f"/v1/drafts/{draft['draft_id']}/views", body)


ApiUrlOption = typer.Option(None, "--api-url", help="API base URL (env DRAFTGATE_API_URL).")
TokenOption = typer.Option(None, "--token", help="Your bearer token (env DRAFTGATE_TOKEN).")
