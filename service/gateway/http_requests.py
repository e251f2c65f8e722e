"""One HTTP action's request and answer: build it from validated arguments, send it, judge it.

Everything here treats the arguments as hostile (they come from a model) and the upstream's
answer as untrusted text: path values are percent-encoded whole and may hold no ``/`` or
``\\`` and not be ``..`` (many servers decode ``%2F`` before routing, so neither can reach
another endpoint), redirects are never followed, answers are read up to a bound, and
whatever of the answer is quoted is inert and bounded (``upstream_text``).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import quote

import httpx

MAX_RESPONSE_BYTES = 1024 * 1024  # an answer larger than this is not relayed or recorded
USER_AGENT = "draftgate-gateway"
HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")

# "{name}" or "{a.b}" fills in an argument; "{{" and "}}" are literal braces.
TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
ARGUMENT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*")


class Missing:
    """An argument the caller left out: its key is left out of the request too."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = Missing()


class RequestProblem(ValueError):
    """The arguments cannot make a safe request (an empty or dot-only path segment)."""


def placeholders(template: Any) -> list[str]:
    """Every argument path a request template names (strings, and inside lists and objects).

    RequestProblem if a string holds a malformed placeholder or a lone brace."""
    if isinstance(template, str):
        names = [m.group(1) for m in TOKEN.finditer(template) if m.group(1) is not None]
        for name in names:
            if not ARGUMENT_PATH.fullmatch(name):
                raise RequestProblem(f"{{{name}}} is not an argument name (names and dots)")
        if "{" in TOKEN.sub("", template) or "}" in TOKEN.sub("", template):
            raise RequestProblem("a lone brace; write {{ or }} for a literal one")
        return names
    if isinstance(template, Mapping):
        return [name for value in template.values() for name in placeholders(value)]
    if isinstance(template, list):
        return [name for value in template for name in placeholders(value)]
    return []


def whole_placeholder(template: str) -> str | None:
    """``"{x}"`` alone: the argument's JSON value replaces the string, keeping its type."""
    match = TOKEN.fullmatch(template)
    return match.group(1) if match and match.group(1) is not None else None


def lookup(arguments: Mapping[str, Any], path: str) -> Any:
    value: Any = arguments
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING
        value = value[part]
    return MISSING if value is None else value


def fill(template: Any, arguments: Mapping[str, Any]) -> Any:
    """The JSON value a body template makes from the arguments; omitted arguments drop out."""
    if isinstance(template, str):
        whole = whole_placeholder(template)
        if whole is not None:
            return lookup(arguments, whole)
        return interpolate(template, arguments, encode=str)
    if isinstance(template, Mapping):
        filled = {key: fill(value, arguments) for key, value in template.items()}
        return {key: value for key, value in filled.items() if value is not MISSING}
    if isinstance(template, list):
        return [v for v in (fill(item, arguments) for item in template) if v is not MISSING]
    return template


def interpolate(template: str, arguments: Mapping[str, Any], *, encode: Any) -> str:
    """Placeholders inside text; each value is a scalar (checked when the file is loaded)."""

    def one(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        value = lookup(arguments, match.group(1))
        return str(encode("" if value is MISSING else scalar_text(value)))

    return TOKEN.sub(one, template)


def scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def path_segment(value: str) -> str:
    """One argument as a path segment: every reserved character encoded, nothing else to it."""
    if value.strip(".") == "":  # "", "." and ".." would address another resource
        raise RequestProblem(f"{value!r} cannot be used in a URL path")
    if "/" in value or "\\" in value:  # servers decode %2F (and %5C) before routing
        raise RequestProblem(f"{value!r} cannot be used in a URL path (it holds a slash)")
    return quote(value, safe="")


@dataclass(frozen=True)
class Prepared:
    method: str
    url: str
    query: tuple[tuple[str, str | int | float | bool | None], ...]
    body: Any  # MISSING: no body


def prepare(
    *,
    base_url: str,
    method: str,
    path: str,
    query: Mapping[str, str],
    body: Any,
    arguments: Mapping[str, Any],
) -> Prepared:
    """The request the declaration makes from these (validated, JSON-dumped) arguments."""
    url = base_url.rstrip("/") + interpolate(path, arguments, encode=path_segment)
    pairs: list[tuple[str, str]] = []
    for name, template in query.items():
        whole = whole_placeholder(template)
        value = lookup(arguments, whole) if whole is not None else template
        if value is MISSING:
            continue
        if whole is None:
            value = interpolate(template, arguments, encode=str)
        items = value if isinstance(value, list) else [value]
        pairs += [(name, scalar_text(item)) for item in items]
    filled = MISSING if body is None else fill(body, arguments)
    return Prepared(method, url, tuple(pairs), filled)


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    raw: bytes
    truncated: bool  # the answer was longer than MAX_RESPONSE_BYTES

    def json(self) -> Any:
        """The answer's JSON value, or MISSING when it is not (complete, parseable) JSON."""
        if self.truncated or not self.raw:
            return MISSING
        try:
            return json.loads(self.raw)
        except (ValueError, RecursionError):
            return MISSING

    def message(self) -> str:
        """What the upstream says went wrong, from its JSON error body or its text."""
        body = self.json()
        if isinstance(body, Mapping):
            found = _error_message(body)
            if found:
                return found
        if body is MISSING and self.content_type.startswith("text/"):
            return self.raw[:2000].decode(errors="replace")
        return ""


MESSAGE_KEYS = ("message", "detail", "error_description", "error", "title", "description")


def _error_message(body: Mapping[str, Any]) -> str:
    for key in MESSAGE_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, Mapping):
            inner = _error_message(value)
            if inner:
                return inner
        if isinstance(value, list):  # FastAPI's validation errors: [{"loc": …, "msg": …}]
            texts = [str(item.get("msg")) for item in value if isinstance(item, Mapping)]
            if any(texts):
                return "; ".join(t for t in texts if t)
    return ""


class TransportFailure(Exception):
    """No answer: the upstream could not be reached, or did not answer in time."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


def send(prepared: Prepared, *, headers: Mapping[str, str], timeout_seconds: float) -> Answer:
    """Make the request once (no redirects followed) and read the answer within bounds.

    ``timeout_seconds`` bounds the whole call (connect, headers and body): httpx's timeouts
    bound each read, so an upstream dripping a byte at a time would otherwise hold it."""
    request_headers = {"User-Agent": USER_AGENT, "Accept": "application/json", **headers}
    content = None
    if prepared.body is not MISSING:
        content = json.dumps(prepared.body, separators=(",", ":"), ensure_ascii=False).encode()
        request_headers["Content-Type"] = "application/json"
    deadline = _Deadline(timeout_seconds)
    try:
        with (
            deadline,
            httpx.Client(timeout=timeout_seconds, follow_redirects=False, trust_env=False) as http,
            http.stream(
                prepared.method,
                prepared.url,
                params=prepared.query,
                content=content,
                headers=request_headers,
                extensions={"trace": deadline.trace},
            ) as response,
        ):
            raw, truncated = _read_bounded(response.iter_bytes(), deadline=deadline.at)
            answer = Answer(
                response.status_code,
                response.headers.get("content-type", "").lower(),
                raw,
                truncated,
            )
    except httpx.TimeoutException:
        raise TransportFailure(f"no answer within {timeout_seconds:g} s") from None
    except httpx.HTTPError as exc:  # the class only: a message may hold the URL or a header
        if deadline.expired:  # the watchdog cut the connection
            raise TransportFailure(f"no answer within {timeout_seconds:g} s") from None
        raise TransportFailure(f"the request failed ({type(exc).__name__})") from None
    if deadline.expired:  # an answer the cut connection ended is not the whole answer
        raise TransportFailure(f"no answer within {timeout_seconds:g} s")
    return answer


class _Deadline:
    """One wall-clock deadline for a whole request: when it passes, a timer shuts the
    request's socket down, which wakes a read blocked on a slow upstream."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpcore's trace extension: the connection's socket, once it is connected."""
        if not event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            return
        stream = info.get("return_value")
        found = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(found, socket.socket):
            with self._lock:
                self._sockets.append(found)
                if self.expired:
                    _shut(found)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


def _read_bounded(chunks: Iterable[bytes], *, deadline: float) -> tuple[bytes, bool]:
    """At most MAX_RESPONSE_BYTES, within the deadline (checked per chunk as well)."""
    received = bytearray()
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("the answer took longer than the timeout")
        received += chunk
        if len(received) > MAX_RESPONSE_BYTES:
            return bytes(received[:MAX_RESPONSE_BYTES]), True
    return bytes(received), False


class Verdict(Enum):
    SUCCESS = "success"
    TRANSIENT = "transient"
    FAILURE = "failure"


@dataclass(frozen=True)
class StatusRules:
    """Which statuses mean what. Declared lists come first; then 2xx succeed (only when no
    success list is declared), 408, 429 and 5xx are transient, everything else is final."""

    success: frozenset[int] | None = None
    business_failure: frozenset[int] = frozenset()
    transient: frozenset[int] = frozenset()

    def verdict(self, status: int) -> Verdict:
        if self.success is not None and status in self.success:
            return Verdict.SUCCESS
        if status in self.transient:
            return Verdict.TRANSIENT
        if status in self.business_failure:
            return Verdict.FAILURE
        if self.success is None and 200 <= status < 300:
            return Verdict.SUCCESS
        if status in (408, 429) or status >= 500:
            return Verdict.TRANSIENT
        return Verdict.FAILURE


# --- the allow-list of a response ------------------------------------------------------------


def project(value: Any, paths: Iterable[tuple[str | int, ...]]) -> Any:
    """Only the parts of ``value`` the paths name (``parse_path`` tuples), in its own shape."""
    result: Any = MISSING
    for steps in paths:
        result = _merge(result, _pick(value, steps))
    return {} if result is MISSING else result


def _pick(value: Any, steps: tuple[str | int, ...]) -> Any:
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if step == "*":
        return [_pick(item, rest) for item in value] if isinstance(value, list) else MISSING
    if isinstance(step, int):
        if not isinstance(value, list) or step >= len(value):
            return MISSING
        return [MISSING] * step + [_pick(value[step], rest)]
    if not isinstance(value, Mapping) or step not in value:
        return MISSING
    picked = _pick(value[step], rest)
    return MISSING if picked is MISSING else {step: picked}


def _merge(left: Any, right: Any) -> Any:
    if left is MISSING:
        return _clean(right)
    if right is MISSING:
        return left
    if isinstance(left, dict) and isinstance(right, dict):
        merged = dict(left)
        for key, value in right.items():
            merged[key] = _merge(merged.get(key, MISSING), value)
        return merged
    if isinstance(left, list) and isinstance(right, list):
        return [
            _merge(left[i] if i < len(left) else MISSING, right[i] if i < len(right) else MISSING)
            for i in range(max(len(left), len(right)))
        ]
    return _clean(right)


def _clean(value: Any) -> Any:
    """Gaps of a projected list (items a path did not reach) become nulls in the output."""
    if isinstance(value, list):
        return [None if item is MISSING else _clean(item) for item in value]
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items() if item is not MISSING}
    return value
