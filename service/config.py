"""Settings, read once from the environment (prefix ``DRAFTGATE_``)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_STATE_DIR = Path(".draftgate")


# The reference policies (DESIGN.md §4). Tiers are written per currency, in major units of
# that currency (a bound means nothing without its currency); a currency not listed gets
# the strictest tier. Refunds of one order add up over 30 days, so a large refund cannot be
# split into small ones that each need a single approver.
def _refund_tiers(one_approver_up_to: str) -> list[dict[str, Any]]:
    return [{"up_to": one_approver_up_to, "approvals": 1}, {"approvals": 2}]


DEFAULT_POLICIES: dict[str, Any] = {
    "refund": {
        "ttl_seconds": 86_400,
        "tiers": {
            "USD": _refund_tiers("500.00"),
            "EUR": _refund_tiers("500.00"),
            "GBP": _refund_tiers("400.00"),
            "CHF": _refund_tiers("450.00"),
            "CAD": _refund_tiers("700.00"),
            "AUD": _refund_tiers("750.00"),
            "CNY": _refund_tiers("3500.00"),
            "JPY": _refund_tiers("75000"),
        },
        "cumulative": {"by": "order_id", "window_seconds": 30 * 86_400},
    },
    "cancel_order": {"ttl_seconds": 86_400, "tiers": [{"approvals": 1}]},
    "change_shipping_address": {"ttl_seconds": 86_400, "tiers": [{"approvals": 1}]},
}
# The demo stack (`draftgate dev`) also lets approvers sign standing grants of refunds for up
# to 7 days (docs/approvals.md, "Standing grants"), and watches how carefully refunds are
# reviewed (docs/metrics.md, "Oversight"); the reference policies do neither.
DEMO_POLICIES: dict[str, Any] = {
    **DEFAULT_POLICIES,
    "refund": {
        **DEFAULT_POLICIES["refund"],
        "grants": {"max_seconds": 7 * 86_400},
        "oversight": {"min_dwell_seconds": 5, "flag_after": 5, "escalate_after_seconds": 3_600},
    },
}


class Settings(BaseSettings):
    """Everything an operator can set. Defaults give the embedded single-machine setup."""

    model_config = SettingsConfigDict(env_prefix="DRAFTGATE_", extra="ignore")

    # Where the embedded setup keeps its SQLite database, keys, secrets and demo manifest.
    state_dir: Path = DEFAULT_STATE_DIR
    # SQLAlchemy URL of the database (postgresql+psycopg://… in production); empty: the
    # embedded SQLite file <state_dir>/draftgate.db.
    database_url: str = ""
    # Celery broker URL (redis://… in production); empty: kombu's server-less SQLAlchemy
    # transport on a SQLite file in the state dir.
    broker_url: str = ""
    # The queue executions travel on (separate deployments sharing a broker use their own).
    broker_queue: str = "draftgate"

    # Tenant used by CLI commands when none is given, and for audit events that
    # cannot be attributed to a tenant (a request with no or an unknown token).
    default_tenant: str = "demo"

    # Python modules whose ``ACTIONS`` are registered; a user's own package is
    # listed here exactly like the bundled reference shop.
    action_modules: list[str] = Field(default_factory=lambda: ["service.shop.definitions"])
    # The gateway file (YAML): upstream MCP servers and REST APIs whose declared tools become
    # actions beside those of action_modules (docs/gateway.md). Unset: no gateway.
    gateway_file: Path | None = None

    # Approval policies per write action, as JSON: per-currency tiers of required approvals,
    # a draft's time to live, and amounts that add up (DESIGN.md §4; default: DEFAULT_POLICIES).
    policies: dict[str, Any] = Field(default_factory=lambda: dict(DEFAULT_POLICIES))
    # The time to live of a draft whose action has no policy of its own.
    default_draft_ttl_seconds: int = Field(default=86_400, ge=60)
    # How long an idempotency key is remembered (at least a day); then it is collected.
    idempotency_retention_seconds: int = Field(default=86_400, ge=86_400)

    # The reference shop's simulated carrier: a latency above the timeout makes
    # get_logistics fail with the retryable UPSTREAM_TIMEOUT.
    shop_carrier_latency_ms: int = Field(default=0, ge=0)
    shop_carrier_timeout_ms: int = Field(default=2_000, ge=1)
    shop_refund_window_days: int = Field(default=30, ge=0)

    # Approvals: how far a statement's issued_at may be from the server's clock.
    approval_clock_skew_seconds: int = Field(default=300, ge=1, le=3_600)

    # Passkeys (WebAuthn, docs/approvals.md): the relying party ID passkeys are scoped to (the
    # console's host or a registrable suffix of it; empty: the host of api_public_url), the
    # origins assertions may come from (empty: the origin of api_public_url, where the
    # console is served), and how long a passkey registration challenge stays usable.
    webauthn_rp_id: str = Field(default="", max_length=253)
    webauthn_origins: list[str] = Field(default_factory=list)
    webauthn_registration_ttl_seconds: int = Field(default=300, ge=30, le=3_600)

    # Execution: retries of transient downstream failures, with exponential backoff.
    execution_max_attempts: int = Field(default=5, ge=1, le=50)
    execution_retry_base_seconds: float = Field(default=2.0, gt=0)
    execution_retry_max_seconds: float = Field(default=60.0, gt=0)
    # A running execution whose worker stopped renewing it for this long is taken over. The
    # task's soft time limit is 0.8 of it, and a gateway write's upstream waits must fit in
    # 90% of that (docs/gateway.md, "Timeouts and the execution's time limit").
    execution_lease_seconds: int = Field(default=120, ge=1)
    # Redis redelivers an unacknowledged task after this long (must exceed the longest
    # task run, and every retry countdown, so a live task is never delivered twice).
    broker_visibility_timeout_seconds: int = Field(default=900, ge=1)
    # The sweeper: how often it runs, and how old an unpublished outbox row or a
    # stalled execution must be before it re-publishes it.
    sweep_interval_seconds: float = Field(default=30.0, gt=0)
    republish_after_seconds: int = Field(default=60, ge=1)
    # An execution that has not started this long after it was requested (an outage, a lost
    # queue) ends expired instead of running hours or days after the approver asked for it.
    execution_start_deadline_seconds: int = Field(default=3_600, ge=60)

    # Fault injection for the reference shop and for drills (never set in production):
    # the shop's payment provider fails transiently this many times per idempotency key,
    # and the worker pauses this long between the downstream mutation and recording it.
    shop_transient_failures: int = Field(default=0, ge=0)
    fault_pause_after_downstream_ms: int = Field(default=0, ge=0)

    # Signed audit checkpoints: the Ed25519 key lives in a file, never in the database
    # (default <state_dir>/checkpoint-key.pem); beat signs each tenant's head this often.
    checkpoint_key_file: Path | None = None
    # Processes without the private key (the API) verify with the public key alone.
    checkpoint_public_key: str = ""
    checkpoint_interval_seconds: float = Field(default=300.0, gt=0)

    # The server's own secret (it signs page cursors): a file of at least 32 bytes, created
    # when missing (default <state_dir>/secret-key). Every API replica must read the same one.
    secret_key_file: Path | None = None

    # Outgoing webhooks (docs/webhooks.md): attempts per delivery before it is marked failed.
    webhook_max_attempts: int = Field(default=8, ge=1, le=30)
    # The wait after failed attempt n is base * 2^(n-1) seconds, at most the max (waits
    # longer than half the broker's visibility timeout are left to the sweep).
    webhook_retry_base_seconds: float = Field(default=5.0, gt=0)
    webhook_retry_max_seconds: float = Field(default=600.0, gt=0)

    # The bound on each phase of one delivery attempt (connect, send, answer).
    webhook_timeout_seconds: float = Field(default=5.0, gt=0, le=30)

    # How often beat publishes due webhook deliveries (new ones wait at most this long).
    webhook_sweep_interval_seconds: float = Field(default=5.0, gt=0)

    # Let webhooks reach loopback and private addresses (receivers on this host or network);
    # off, an endpoint may only resolve to public addresses (an admin token is no way in).
    webhook_allow_private_addresses: bool = False

    # Bounds applied to every tool argument object before schema validation.
    max_argument_bytes: int = Field(default=16_384, ge=256)
    max_argument_depth: int = Field(default=6, ge=2)
    # Rate limits ("<count>/<second|minute|hour>"; empty: none), counted in memory per process
    # or, with a redis:// URL, shared by every replica. Beyond the first refusals per window
    # from one address, refusals are audited as a count, not one event each.
    rate_limit_storage_url: str = "memory://"
    rate_limit_per_address: str = "6000/minute"
    rate_limit_per_token: str = "3000/minute"  # noqa: S105 - a rate, not a secret
    rate_limit_recorded_refusals: str = "20/minute"

    # The largest HTTP request body either door reads (API and MCP), checked before parsing.
    max_request_bytes: int = Field(default=65_536, ge=1_024)

    # The public URL of the MCP endpoint.
    mcp_public_url: str = "http://127.0.0.1:8001/mcp"
    # Host/Origin headers the MCP endpoint accepts (DNS-rebinding protection); an
    # empty host list switches the check off (behind a proxy that does it).
    mcp_allowed_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    )
    mcp_allowed_origins: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    )
    # The proxies whose X-Forwarded-For / X-Forwarded-Proto the API and MCP servers believe
    # (uvicorn's forwarded_allow_ips: comma-separated addresses or networks, or "*"). Behind
    # a proxy, name it here: otherwise every client has the proxy's address, and the
    # per-address rate limit counts them all as one.
    forwarded_allow_ips: str = "127.0.0.1"

    # The public URL of the HTTP API: its resource identifier in its OAuth protected-resource
    # metadata, and the audience an OAuth access token for the API must carry.
    api_public_url: str = "http://127.0.0.1:8000"
    # OAuth resource-server mode (docs/authorization.md): the issuer URL of an external OpenID
    # provider whose JWT access tokens both doors accept beside draftgate tokens; empty: off.
    oidc_issuer: str = ""
    # Scopes every OAuth access token must carry (also advertised as scopes_supported).
    oidc_required_scopes: list[str] = Field(default_factory=lambda: ["draftgate"])
    # Signature algorithms accepted on OAuth access tokens: asymmetric ones only.
    oidc_algorithms: list[str] = Field(
        default_factory=lambda: ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
    )
    # The claim that names the caller (its draftgate subject).
    oidc_subject_claim: str = "sub"
    # The claim that names the caller's draftgate role (agent, approver, auditor, admin).
    oidc_role_claim: str = "draftgate_role"
    # The claim that names the caller's tenant; ignored when oidc_tenant is set.
    oidc_tenant_claim: str = "draftgate_tenant"
    # One tenant for every OAuth caller (a provider that cannot add a tenant claim); empty:
    # the tenant comes from oidc_tenant_claim.
    oidc_tenant: str = ""
    # The claim that names the end user an agent acts for (required for agents).
    oidc_on_behalf_of_claim: str = "draftgate_on_behalf_of"
    # How far exp/nbf/iat may be off from this server's clock.
    oidc_clock_skew_seconds: int = Field(default=30, ge=0, le=300)
    # How long the provider's discovery document and signing keys (JWKS) are kept.
    oidc_jwks_cache_seconds: int = Field(default=300, ge=1)
    # The shortest time between two JWKS fetches made because a token named an unknown key
    # (rotation), so a flood of made-up key ids cannot make draftgate hammer the provider.
    oidc_jwks_min_refresh_seconds: float = Field(default=30.0, ge=0)
    # How long past their cache time the keys already held keep verifying while the provider
    # cannot be reached (a key the provider withdrew, perhaps because it leaked, must not live
    # on while whoever holds it keeps the provider away); then JWTs are provider_unavailable.
    oidc_jwks_max_stale_seconds: int = Field(default=3_600, ge=0)
    # Timeout of each request to the OpenID provider.
    oidc_http_timeout_seconds: float = Field(default=5.0, gt=0)

    # The bearer token Prometheus must present on /metrics (API, MCP server and worker);
    # empty: the API's and the worker's /metrics answer whoever reaches the port (totals only:
    # no tenants, no ids) and the MCP server, which faces agents, serves none.
    metrics_token: str = ""
    # The port of the worker's /metrics (Prometheus text, the main process answering for its
    # pool; prefork pools need PROMETHEUS_MULTIPROC_DIR, docs/metrics.md); 0: no endpoint.
    worker_metrics_port: int = Field(default=0, ge=0, le=65_535)
    # The interface the worker's /metrics listens on.
    worker_metrics_host: str = "127.0.0.1"

    # The approvers' console (/console/): a signed-in session ends after this long without a
    # request, and in any case this long after it signed in.
    console_idle_timeout_seconds: int = Field(default=1_800, ge=60, le=86_400)
    console_session_lifetime_seconds: int = Field(default=43_200, ge=300, le=604_800)
    # Live-update streams (server-sent events) one session may hold open in one API process,
    # and how often each stream looks for news in the audit log.
    console_streams_per_session: int = Field(default=4, ge=1, le=32)
    console_poll_seconds: float = Field(default=1.0, gt=0, le=30)

    # How log lines are written (docs/observability.md): "json", one object per line, for
    # production; "console", aligned human-readable lines (what `draftgate dev` uses).
    log_format: Literal["json", "console"] = "json"
    # The lowest level logged (DEBUG, INFO, WARNING, ERROR); SQL statements are never logged.
    log_level: str = Field(default="INFO", pattern=r"(?i)^(debug|info|warning|error|critical)$")

    def execution_soft_time_limit(self) -> float:
        """The execution task's soft time limit, in seconds: below the lease, so a stuck
        attempt ends (and is retried) before another delivery could take it over. The
        gateway keeps a write's upstream calls inside it (service.gateway.build)."""
        return self.execution_lease_seconds * 0.8

    def resolved_database_url(self) -> str:
        """The configured database URL, or the embedded SQLite file in the state dir."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'draftgate.db').resolve()}"

    def resolved_checkpoint_key_file(self) -> Path:
        return self.checkpoint_key_file or self.state_dir / "checkpoint-key.pem"

    def resolved_secret_key_file(self) -> Path:
        return self.secret_key_file or self.state_dir / "secret-key"

    def resolved_broker_url(self) -> str:
        """The configured broker, or kombu's server-less SQLAlchemy transport over SQLite."""
        if self.broker_url:
            return self.broker_url
        return f"sqla+sqlite:///{(self.state_dir / 'broker.db').resolve()}"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (tests build their own ``Settings`` instead)."""
    return Settings()


def child_environment(settings: Settings) -> dict[str, str]:
    """This process's environment with exactly ``settings`` as its DRAFTGATE_* variables: what
    a child process (a worker, a server) must be given to see the same settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGATE_")}
    for name, value in settings.model_dump(mode="json").items():
        if isinstance(value, dict | list):
            env[f"DRAFTGATE_{name.upper()}"] = json.dumps(value)
        elif value not in ("", None):
            env[f"DRAFTGATE_{name.upper()}"] = str(value)
    return env
