"""Logs: one configuration for every process, structlog rendering the standard library's records.

Everything logs through the standard ``logging`` module (draftgate, uvicorn, Celery, kombu);
one handler on the root logger renders each record through structlog: JSON lines in
production, aligned human-readable lines in ``draftgate dev``. Every line names its trace
(``trace_id``, null outside a request or task) and, where a front door bound them, the
``draft_id`` and ``execution_id``. A redaction step runs last before rendering, as defence
in depth: nothing should log a secret, and if something does, it is not written.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from service.tracing import current_trace_id

LOG_FORMATS = ("json", "console")
REDACTED = "[redacted]"

# Loggers that are noisy or unsafe below WARNING whatever the level asked for: SQLAlchemy's
# engine logs every statement (and, at DEBUG, every row), the OTLP exporter's HTTP client
# each export, and the MCP SDK's stateless transport one "Terminating session" per request.
QUIET_LOGGERS = (
    "sqlalchemy",
    "urllib3",
    "opentelemetry",
    "httpcore",
    "hpack",
    "multipart",
    "mcp.server.streamable_http",
)

# Field names whose values are secrets wherever they appear.
_SECRET_KEY = re.compile(
    r"authorization|token|secret|passw|passphrase|signature|private|api[_-]?key|cookie|"
    r"credential|checkpoint_key",
    re.IGNORECASE,
)
# Secrets recognisable in free text: draftgate's bearer tokens, OAuth access tokens (JWTs),
# Authorization header values, PEM private keys, passwords in URLs, and the values of query
# parameters named like secrets.
_SECRET_TEXT = [
    (re.compile(r"dg_[A-Za-z0-9_-]{16,}"), "dg_" + REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "[redacted jwt]"),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"), r"\1" + REDACTED + "@"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        "[redacted private key]",
    ),
    (
        re.compile(
            r"(?i)([?&][^=&\s]*(?:token|key|secret|signature|code|passw)[^=&\s]*=)[^&\s\"]*"
        ),
        r"\1" + REDACTED,
    ),
]


def configure_logging(*, fmt: str, level: str | int, stream: TextIO | None = None) -> None:
    """Route every logger of this process through one structlog-rendering handler.

    ``fmt`` is ``json`` or ``console``; ``level`` a standard level name. Idempotent: a second
    call replaces the handler of the first.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        add_trace_id,
        structure_access_line,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        # Tracebacks arrive as text (format_exc_info, then redact): no rich formatting of them.
        else structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        pass_foreign_args=True,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            redact,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    _adopt_library_loggers()
    logging.captureWarnings(True)  # Python's warnings (Celery's superuser one) as lines too
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            structlog.stdlib.PositionalArgumentsFormatter(),
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _adopt_library_loggers() -> None:
    """uvicorn and Celery install handlers (and levels, or disable loggers) of their own;
    theirs would print every line twice or swallow the access log."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "celery.task"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.disabled = False
        logger.setLevel(logging.NOTSET)


def bind_ids(**ids: str | None) -> None:
    """Name these ids (the known ones) on every later line of the current context."""
    structlog.contextvars.bind_contextvars(
        **{key: value for key, value in ids.items() if value is not None}
    )


@contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Name ``draft_id`` / ``execution_id`` (the known ones) on every line logged in the block."""
    known = {key: value for key, value in ids.items() if value is not None}
    with structlog.contextvars.bound_contextvars(**known):
        yield


def add_trace_id(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """The trace of the request or task being served; null outside one."""
    event.setdefault("trace_id", current_trace_id())
    return event


def structure_access_line(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """uvicorn's access line as fields (its query string with secret-looking values redacted)."""
    args = event.pop("positional_args", ())  # a foreign record's (pass_foreign_args)
    record = event.get("_record")
    if record is None or record.name != "uvicorn.access" or len(args) != 5:
        return event
    client, method, full_path, http_version, status = args
    path, _, query = str(full_path).partition("?")
    event.update(
        event="request",
        client=client,
        method=method,
        path=path + ("?" + _redacted_query(query) if query else ""),
        http_version=http_version,
        status=status,
    )
    return event


def redact(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """Replace the values of secret-named fields, and secrets recognisable in text."""
    return {key: _redacted(key, value) for key, value in event.items()}


def _redacted(key: str, value: Any) -> Any:
    if key not in ("event", "exception", "trace_id") and _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, bytes | bytearray):  # raw headers, e.g. (b"authorization", b"…")
        value = bytes(value).decode("latin-1")
    if isinstance(value, str):
        for pattern, replacement in _SECRET_TEXT:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, Mapping):
        return {str(k): _redacted(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted("", item) for item in value]
    return value


def _redacted_query(query: str) -> str:
    """The query as sent, with the value of each secret-named parameter replaced."""
    pairs = (pair.partition("=") for pair in query.split("&"))
    return "&".join(
        f"{key}{equals}{REDACTED if equals and _SECRET_KEY.search(key) else value}"
        for key, equals, value in pairs
    )
