"""One delivery attempt, as the worker makes it: claim, send (outside any transaction), record.

- **Claim**, under the delivery's row lock: nothing to do if it is final, leased by another
  worker, or not due yet (an early duplicate message is dropped: the sweeper publishes every
  pending delivery once it is due). Otherwise take a lease and count the attempt.
- **Send** with no transaction open and no lock held, so a slow receiver holds up nothing
  but this task: signed per Standard Webhooks, no redirects followed, no proxies from the
  environment, each phase bounded by ``webhook_timeout_seconds``, to the address the
  host resolved to once checked (``urls.resolve``: no private address unless allowed). Only
  the status code and latency are kept: the response body is never read, and an error is
  named by its class only, so the delivery log is no way to read or scan what the server
  reaches.
- **Record**: the attempt joins the delivery log and is audited (``webhook.delivered``,
  ``webhook.retry_scheduled`` or ``webhook.failed``); a failure is retried with exponential
  backoff until ``webhook_max_attempts``, then the delivery is marked failed.

A worker that dies mid-attempt leaves a lease that runs out; the sweeper publishes the
delivery again and the receiver may see the same ``webhook-id`` twice, which is what the
id is for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpcore
from sqlmodel import Session
from standardwebhooks import Webhook

from service.audit import actions as audit
from service.canonical import canonical_json
from service.config import Settings
from service.db import session_scope
from service.errors import DomainError
from service.runtime import Runtime
from service.sql import rfc3339, utcnow
from service.webhooks import crypto, repository, state
from service.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery
from service.webhooks.urls import Target, checked_url, resolve

ACTOR = "system:worker"
USER_AGENT = "draftgate-webhooks/1"
MAX_ERROR_CHARS = 300
# A lease outlives the longest attempt (connect + write + read, each bounded) by this much.
LEASE_MARGIN_SECONDS = 30


@dataclass(frozen=True)
class DeliveryResult:
    status: str
    retry_in: float | None = None  # retry this task after so many seconds (Celery countdown)


@dataclass(frozen=True)
class Claim:
    delivery_id: str
    attempt: int
    url: str
    secret: str
    body: bytes


@dataclass(frozen=True)
class Sent:
    ok: bool
    latency_ms: int
    status_code: int | None = None
    error: str | None = None


def deliver(runtime: Runtime, delivery_id: str) -> DeliveryResult:
    """Make one attempt at a delivery, if one is due."""
    claimed = _claim(runtime, delivery_id)
    if isinstance(claimed, DeliveryResult):
        return claimed
    settings = runtime.settings
    sent = send(
        claimed,
        timeout=settings.webhook_timeout_seconds,
        allow_private=settings.webhook_allow_private_addresses,
    )
    return _record(runtime, claimed, sent)


def payload(delivery: WebhookDelivery, *, api_public_url: str) -> dict[str, Any]:
    """What a receiver gets: ids, statuses and a link to the draft's card, nothing else (no
    params, summary, reason, amounts or people: those are read in the console, signed in)."""
    occurred_at = rfc3339(delivery.occurred_at)
    data: dict[str, Any] = {"tenant": delivery.tenant, "occurred_at": occurred_at}
    if delivery.draft_id is not None:
        data |= {
            "draft_id": delivery.draft_id,
            "execution_id": delivery.execution_id,
            "revision": delivery.revision,
            "action": delivery.action,
            "status": delivery.subject_status,
            "audit_seq": delivery.audit_seq,
            "url": f"{api_public_url.rstrip('/')}/console/drafts/{delivery.draft_id}",
        }
    else:  # a test ping
        data |= {"endpoint_id": delivery.endpoint_id, "status": delivery.subject_status}
    return {"type": delivery.event_type, "timestamp": occurred_at, "data": data}


def send(claim: Claim, *, timeout: float, allow_private: bool = False) -> Sent:
    """POST the signed body; never raises for anything the receiver or the network does."""
    started = time.perf_counter()
    try:
        target = resolve(claim.url, allow_private=allow_private)
    except DomainError:
        return Sent(ok=False, latency_ms=_ms_since(started), error="AddressRefused")
    except (OSError, UnicodeError) as exc:
        return Sent(ok=False, latency_ms=_ms_since(started), error=type(exc).__name__)
    sent_at = datetime.now(UTC)
    signature = Webhook(claim.secret).sign(claim.delivery_id, sent_at, claim.body.decode())
    headers = [
        (b"host", _host_header(target).encode()),
        (b"content-type", b"application/json"),
        (b"user-agent", USER_AGENT.encode()),
        (b"webhook-id", claim.delivery_id.encode()),
        (b"webhook-timestamp", str(int(sent_at.timestamp())).encode()),
        (b"webhook-signature", signature.encode()),
    ]
    limits = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
    parts = urlsplit(claim.url)
    path = (urlunsplit(("", "", parts.path or "/", parts.query, "")) or "/").encode()
    problem: Exception | None = None
    for address in target.addresses:
        pinned = httpcore.URL(
            scheme=target.scheme.encode(), host=address.encode(), port=target.port, target=path
        )
        try:
            status = _post(pinned, headers, claim.body, limits, sni_hostname=target.host)
        except httpcore.ConnectError as exc:  # refused or unreachable: the next address
            problem = exc
            continue
        except Exception as exc:  # a receiver's failure is an outcome to record, never a crash
            return Sent(ok=False, latency_ms=_ms_since(started), error=type(exc).__name__)
        ok = 200 <= status < 300
        error = None if ok else _status_error(status)
        return Sent(ok, _ms_since(started), status_code=status, error=error)
    error = type(problem).__name__ if problem is not None else "AddressRefused"
    return Sent(ok=False, latency_ms=_ms_since(started), error=error)


def _post(
    url: httpcore.URL,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    limits: dict[str, float],
    *,
    sni_hostname: str,
) -> int:
    """POST to the pinned address; the status code (the body is never read)."""
    # httpcore, not httpx: it follows no redirects and reads no proxy settings by
    # construction, and it does not log each request's URL at INFO.
    with (
        httpcore.ConnectionPool(max_connections=1, retries=0) as pool,
        pool.stream(
            "POST",
            url,
            headers=headers,
            content=body,
            # The checked address is dialled; the certificate is checked for the name.
            extensions={"timeout": limits, "sni_hostname": sni_hostname},
        ) as response,
    ):
        return response.status


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


def _status_error(status: int) -> str:
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed; give the final URL"
    return f"HTTP {status}"


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


def backoff_seconds(settings: Settings, attempt: int) -> float:
    """The wait after failed attempt ``attempt`` (1, 2, …): base * 2^(attempt-1), capped."""
    delay = settings.webhook_retry_base_seconds * 2 ** (attempt - 1)
    return float(min(delay, settings.webhook_retry_max_seconds))


# --- claim and record: the two short transactions around the send ----------------------------


def _claim(runtime: Runtime, delivery_id: str) -> Claim | DeliveryResult:
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        delivery = repository.delivery(session, delivery_id, for_update=True)
        if delivery is None:
            return DeliveryResult("missing")
        now = utcnow()
        if delivery.status is not DeliveryStatus.PENDING:
            return DeliveryResult(delivery.status.value)
        if _after(delivery.lease_expires_at, now) or _after(delivery.next_attempt_at, now):
            # Another worker is on it, or this is an early duplicate: the one due takes it.
            return DeliveryResult("pending")
        endpoint = repository.endpoint_by_id(session, delivery.endpoint_id)
        assert endpoint is not None  # a foreign key
        if endpoint.removed_at is not None:
            _give_up(session, delivery, now=now, error="the endpoint was removed")
            return DeliveryResult(DeliveryStatus.FAILED.value)
        try:
            url = checked_url(endpoint.url, allow_private=settings.webhook_allow_private_addresses)
            secret = crypto.unseal(
                endpoint.sealed_secret,
                key=crypto.sealing_key(settings.resolved_secret_key_file()),
                tenant=endpoint.tenant,
                endpoint_id=endpoint.id,
            )
        except (DomainError, crypto.SealBroken) as problem:
            reason = problem.message if isinstance(problem, DomainError) else str(problem)
            _give_up(session, delivery, now=now, error=reason)
            return DeliveryResult(DeliveryStatus.FAILED.value)
        lease = 3 * settings.webhook_timeout_seconds + LEASE_MARGIN_SECONDS
        attempt = state.start_attempt(session, delivery, now=now, lease_seconds=lease)
        body = canonical_json(payload(delivery, api_public_url=settings.api_public_url))
        return Claim(delivery.id, attempt, url, secret, body)


def _record(runtime: Runtime, claim: Claim, sent: Sent) -> DeliveryResult:
    settings = runtime.settings
    with session_scope(runtime.engine) as session:
        now = utcnow()
        session.add(
            WebhookAttempt(
                delivery_id=claim.delivery_id,
                number=claim.attempt,
                started_at=now - timedelta(milliseconds=sent.latency_ms),
                latency_ms=sent.latency_ms,
                status_code=sent.status_code,
                ok=sent.ok,
                error=sent.error,
            )
        )
        delivery = repository.delivery(session, claim.delivery_id, for_update=True)
        assert delivery is not None
        if delivery.status is not DeliveryStatus.PENDING or delivery.attempts != claim.attempt:
            return DeliveryResult(delivery.status.value)  # another worker took over meanwhile
        state.end_attempt(session, delivery, status_code=sent.status_code, error=sent.error)
        outcome = _attempt_data(delivery, sent)
        if sent.ok:
            state.finish(session, delivery, DeliveryStatus.DELIVERED, now=now)
            _audit(session, delivery, "webhook.delivered", outcome)
            return DeliveryResult(DeliveryStatus.DELIVERED.value)
        if delivery.attempts >= settings.webhook_max_attempts:
            state.finish(session, delivery, DeliveryStatus.FAILED, now=now)
            _audit(session, delivery, "webhook.failed", outcome)
            return DeliveryResult(DeliveryStatus.FAILED.value)
        return _retry_later(session, delivery, settings, now=now, outcome=outcome)


def _retry_later(
    session: Session,
    delivery: WebhookDelivery,
    settings: Settings,
    *,
    now: datetime,
    outcome: dict[str, Any],
) -> DeliveryResult:
    delay = backoff_seconds(settings, delivery.attempts)
    # A countdown the broker can hold without redelivering it (Redis redelivers what was not
    # acknowledged within its visibility timeout): the task retries itself, and the sweeper
    # steps in only well after it is due. Longer waits are left to the sweeper alone.
    by_task = delay <= settings.broker_visibility_timeout_seconds / 2
    grace = settings.republish_after_seconds if by_task else 0
    state.retry_later(session, delivery, now=now, delay=delay, grace=grace)
    _audit(session, delivery, "webhook.retry_scheduled", {**outcome, "retry_in_seconds": delay})
    return DeliveryResult(DeliveryStatus.PENDING.value, retry_in=delay if by_task else None)


def _give_up(session: Session, delivery: WebhookDelivery, *, now: datetime, error: str) -> None:
    """End a delivery that cannot be sent at all (no attempt is made)."""
    problem = error[:MAX_ERROR_CHARS]
    state.finish(session, delivery, DeliveryStatus.FAILED, now=now, error=problem)
    _audit(session, delivery, "webhook.failed", {**_ids(delivery), "problem": problem})


def _ids(delivery: WebhookDelivery) -> dict[str, Any]:
    return {
        "delivery_id": delivery.id,
        "endpoint_id": delivery.endpoint_id,
        "event_type": delivery.event_type,
    }


def _attempt_data(delivery: WebhookDelivery, sent: Sent) -> dict[str, Any]:
    # No URL, headers, body or response excerpt: ids, the status and how long it took.
    # "problem", not "error": readers of audit data take an "error" to be a domain error object.
    return {
        **_ids(delivery),
        "attempt": delivery.attempts,
        "status_code": sent.status_code,
        "latency_ms": sent.latency_ms,
        "problem": sent.error,
    }


def _audit(session: Session, delivery: WebhookDelivery, type_: str, data: dict[str, Any]) -> None:
    audit.record(
        session,
        tenant=delivery.tenant,
        actor=ACTOR,
        type=type_,
        draft_id=delivery.draft_id,
        execution_id=delivery.execution_id,
        data=data,
    )


def _after(moment: datetime | None, now: datetime) -> bool:
    return moment is not None and moment > now
