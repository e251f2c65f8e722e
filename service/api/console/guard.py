"""What every /console response carries and every /console request must show.

Headers: a strict Content-Security-Policy (no inline script or style anywhere), no framing,
no referrer, no sniffing, and pages never cached (they show drafts and carry a CSRF token).

Origin: a request that says it comes from another origin is refused, whatever its method; a
state-changing one must show it comes from the console's own origin. Browsers say so in
``Origin`` — except that under ``Referrer-Policy: no-referrer`` they may send
``Origin: null`` for a same-origin POST — so ``Sec-Fetch-Site: same-origin`` (a header no
page can set) is accepted as the proof when Origin is absent or null. The CSRF token is
checked per route (service.api.console.deps), where the session is known.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.guards import Refuse
from service.sessions import errors

PREFIX = "/console"
STATIC = "/console/static/"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
# Everything else on this origin (the API: JSON, problem+json, metrics) is data, never a
# document: whatever a response holds, no browser runs script from it here or frames it.
API_CSP = "default-src 'none'; frame-ancestors 'none'"
API_HEADERS = [
    (b"content-security-policy", API_CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})


def own_origin(scope: Scope) -> str:
    """The origin this request was sent to (scheme as the server saw it, after trusted proxy
    headers, and the Host header)."""
    host = Headers(scope=scope).get("host", "")
    return f"{scope.get('scheme', 'http')}://{host}".lower()


def is_loopback_http(scope: Scope) -> bool:
    """Plain http to this machine (dev, tests): the only place a cookie may go without Secure."""
    hostname = urlsplit(own_origin(scope)).hostname or ""
    return scope.get("scheme") == "http" and (hostname in LOOPBACK or hostname == "::1")


def origin_problem(scope: Scope) -> str | None:
    """Why this request does not come from the console's own origin, or None."""
    headers = Headers(scope=scope)
    expected = own_origin(scope)
    origin = headers.get("origin")
    fetch_site = headers.get("sec-fetch-site")
    if origin and origin != "null" and origin.lower() != expected:
        return f"the request comes from {origin[:100]}, not from {expected}"
    if fetch_site in {"cross-site", "same-site"}:
        navigating = scope["method"] in SAFE_METHODS and headers.get("sec-fetch-mode") == "navigate"
        if not navigating:  # a link from elsewhere may open a page; nothing else may
            return f"the browser reports a {fetch_site} request"
    if scope["method"] in SAFE_METHODS:
        return None
    if origin and origin != "null":
        return None  # equal to ours (checked above)
    referer = headers.get("referer")
    if referer and _origin_of(referer) == expected:
        return None
    if fetch_site == "same-origin":
        return None
    return "a state-changing request must carry an Origin (or Referer) of this console"


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class ApiHeaders:
    """ASGI middleware giving every response outside /console API_HEADERS (outermost, so the
    limits' and the tracer's refusals carry them too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else PREFIX
        await self.app(scope, receive, send if is_console(path) else _with(send, API_HEADERS))


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def console_send(send: Send, path: str) -> Send:
    """``send``, with every response given the console's headers (and never cached, but for
    the static files, which are revalidated)."""
    cache = b"no-cache" if path.startswith(STATIC) else b"no-store"

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [
                (name, value)
                for name, value in message.get("headers", [])
                if name.lower() != b"cache-control"
            ]
            message["headers"] = [*headers, *HEADERS, (b"cache-control", cache)]
        await send(message)

    return send_with_headers


class ConsoleGuard:
    """ASGI middleware for everything under /console (other paths pass untouched): the
    console's headers on every answer, and the origin check, whose refusals ``refuse``
    audits and answers (service.api.console.refusals)."""

    def __init__(self, app: ASGIApp, *, refuse: Refuse) -> None:
        self.app = app
        self._refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not is_console(path):
            await self.app(scope, receive, send)
            return
        problem = origin_problem(scope)
        if problem is not None:
            await self._refuse(scope, send, errors.cross_origin_refused(problem))
            return
        await self.app(scope, receive, console_send(send, path))


def _with(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    names = {name for name, _ in extra}

    async def send_with_headers(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(n, v) for n, v in message.get("headers", []) if n.lower() not in names]
            message["headers"] = [*headers, *extra]
        await send(message)

    return send_with_headers
