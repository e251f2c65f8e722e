"""The real OpenID provider of the tests: tests/oidc/provider/provider.js (npm's
oidc-provider) in a Node process, one per test process, with draftgate's test clients."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.servers import free_port
from service.config import Settings
from service.shop.seed import DEMO_CUSTOMER

PROVIDER_DIR = Path(__file__).resolve().parent / "provider"
START_TIMEOUT_SECONDS = 30


def _client(client_id: str, role: str | None, subject: str, **extra: Any) -> dict[str, Any]:
    client: dict[str, Any] = {
        "client_id": client_id,
        "client_secret": secret_of(client_id),
        "scope": "draftgate other",
        "draftgate_tenant": "demo",
        "draftgate_subject": subject,
        **extra,
    }
    if role is not None:
        client["draftgate_role"] = role
    return client


def secret_of(client_id: str) -> str:
    return f"test-secret-of-{client_id}-0123456789abcdef"


# The provider's clients: the claims each one's tokens carry come from its metadata.
CLIENTS = [
    _client("support-bot", "agent", "support-bot", draftgate_on_behalf_of=DEMO_CUSTOMER),
    _client(
        "short-lived", "agent", "support-bot", draftgate_on_behalf_of=DEMO_CUSTOMER, ttl_seconds=1
    ),
    _client("agent-for-nobody", "agent", "support-bot"),
    _client("alice-sso", "approver", "alice"),
    _client("audrey-sso", "auditor", "audrey"),
    _client("no-role", None, "someone"),
]


@dataclass
class OidcProvider:
    issuer: str
    other_issuer: str  # another issuer in the same process, signing with the same keys
    process: subprocess.Popen[bytes]

    def token(
        self,
        client_id: str,
        *,
        resource: str,
        scope: str | None = "draftgate",
        issuer: str | None = None,
    ) -> str:
        """An access token by the client credentials grant, for ``resource`` (RFC 8707)."""
        form = {"grant_type": "client_credentials", "resource": resource}
        if scope is not None:
            form["scope"] = scope
        response = httpx.post(
            f"{issuer or self.issuer}/token",
            data=form,
            auth=(client_id, secret_of(client_id)),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        token: str = response.json()["access_token"]
        return token

    def rotate(self) -> None:
        """Replace the main issuer's signing key; the old key leaves its JWKS at once."""
        assert httpx.post(f"{self.issuer}/__rotate", timeout=10).status_code == 204

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's claims, read without verification (what an attacker can read too)."""
    payload = token.split(".")[1]
    parsed: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return parsed


def unavailable(reason: str) -> None:
    """Skip, or fail when the environment promises every service (DRAFTGATE_REQUIRE_SERVICES)."""
    if os.environ.get("DRAFTGATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the OpenID provider cannot run: {reason}")
    pytest.skip(f"the OpenID provider cannot run: {reason}")


def install_provider() -> None:
    """``npm ci`` in the provider's directory when its node_modules is missing (one test
    process at a time: xdist workers share the directory)."""
    if (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        unavailable("npm is not installed")
        return
    lock_path = Path(tempfile.gettempdir()) / "draftgate-oidc-provider-npm.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund"],
                cwd=PROVIDER_DIR,
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                unavailable(f"npm ci failed: {done.stderr[-500:]}")


def start_provider(log_path: Path) -> OidcProvider:
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed")
    assert node is not None
    install_provider()
    config = json.dumps({"clients": CLIENTS})
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [node, "provider.js", config], cwd=PROVIDER_DIR, stdout=subprocess.PIPE, stderr=log
        )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_SECONDS)
    line = process.stdout.readline() if ready else b""
    if not line:
        process.kill()
        process.wait()
        process.stdout.close()
        pytest.fail(f"the OpenID provider did not start: {log_path.read_text()[-2000:]}")
    started = json.loads(line)
    return OidcProvider(started["issuer"], started["other_issuer"], process)


def oidc_settings(root: Path, database_url: str, issuer: str, **overrides: Any) -> Settings:
    """Settings for doors on ports chosen up front: their URLs are the OAuth audiences."""
    mcp_port, api_port = free_port(), free_port()
    values: dict[str, Any] = {
        "state_dir": root / "state",
        "database_url": database_url,
        "mcp_public_url": f"http://127.0.0.1:{mcp_port}/mcp",
        "api_public_url": f"http://127.0.0.1:{api_port}",
        "oidc_issuer": issuer,
        "oidc_subject_claim": "draftgate_subject",
        "oidc_clock_skew_seconds": 1,
        # Every unknown key id refetches the JWKS here, so rotation is seen at once.
        "oidc_jwks_min_refresh_seconds": 0,
        **overrides,
    }
    return Settings(**values)
