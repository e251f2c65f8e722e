"""service.logs: one structlog pipeline for every logger, JSON or console, secrets redacted."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from sqlalchemy import text

from service import logs
from service.db import make_engine
from service.logs import configure_logging
from service.tracing import bound, new_trace_id

TOUCHED = (
    "",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "celery",
    "celery.task",
    *logs.QUIET_LOGGERS,
)


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Where the configured handler writes; every logger is put back as it was afterwards
    (the test process's logging belongs to pytest)."""
    saved = {
        name: (
            logging.getLogger(name).handlers[:],
            logging.getLogger(name).level,
            logging.getLogger(name).propagate,
            logging.getLogger(name).disabled,
        )
        for name in TOUCHED
    }
    yield io.StringIO()
    for name, (handlers, level, propagate, disabled) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
        logger.disabled = disabled
    logging.captureWarnings(False)
    structlog.reset_defaults()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_name_the_trace_and_ids_bound_by_the_door(stream):
    configure_logging(fmt="json", level="INFO", stream=stream)
    trace_id = new_trace_id()
    logging.getLogger("draftgate.test").info("outside")
    with bound(trace_id), logs.bound(draft_id="dft_1", execution_id=None):
        logging.getLogger("draftgate.test").info("inside %s", "a request")
        structlog.get_logger("draftgate.test").info("structured", attempt=2)
    outside, inside, structured = lines(stream)
    assert outside["trace_id"] is None
    assert "draft_id" not in outside
    assert inside["event"] == "inside a request"
    assert (inside["trace_id"], inside["draft_id"], inside["level"]) == (trace_id, "dft_1", "info")
    assert "execution_id" not in inside  # unknown ids are left out, not null
    assert (structured["trace_id"], structured["attempt"]) == (trace_id, 2)
    assert {"timestamp", "logger"} <= set(inside)


def test_uvicorns_access_line_becomes_fields_with_secret_query_values_redacted(stream):
    configure_logging(fmt="json", level="INFO", stream=stream)
    access = logging.getLogger("uvicorn.access")
    access.info(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:5000",
        "GET",
        "/v1/audit/events?access_token=dg_secretsecretsecretsecret&limit=5",
        "1.1",
        200,
    )
    (line,) = lines(stream)
    assert line["event"] == "request"
    assert (line["method"], line["status"], line["client"]) == ("GET", 200, "127.0.0.1:5000")
    assert line["path"] == "/v1/audit/events?access_token=[redacted]&limit=5"
    assert "secretsecret" not in stream.getvalue()


def test_secrets_are_redacted_from_messages_fields_and_tracebacks(stream):
    configure_logging(fmt="json", level="DEBUG", stream=stream)
    token = "dg_" + "A1b2" * 10
    pem = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIBa\n-----END PRIVATE KEY-----"
    log = logging.getLogger("draftgate.test")
    log.info("presented Authorization: Bearer %s", token)
    log.info("sent Authorization: Basic YWxpY2U6c2VjcmV0")
    structlog.get_logger("t").info(
        "fields", passphrase="hunter2", headers={"Authorization": "x", "accept": "json"}, key=pem
    )
    try:
        raise ValueError(f"token {token} refused")
    except ValueError:
        log.exception("failed")
    written = stream.getvalue()
    for secret in (token, "A1b2A1b2", "hunter2", "MC4CAQAwBQYDK2VwBCIEIBa", "YWxpY2U6c2VjcmV0"):
        assert secret not in written, secret
    bearer, basic, fields, failed = lines(stream)
    assert bearer["event"] == "presented Authorization: Bearer dg_[redacted]"
    assert basic["event"] == "sent Authorization: Basic [redacted]"
    assert fields["passphrase"] == "[redacted]"
    assert fields["headers"] == {"Authorization": "[redacted]", "accept": "json"}
    assert fields["key"] == "[redacted private key]"
    assert "ValueError: token dg_[redacted] refused" in failed["exception"]


def test_sql_is_not_logged_even_at_debug(stream):
    configure_logging(fmt="json", level="DEBUG", stream=stream)
    engine = make_engine("sqlite://")
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 'a statement' AS logged"))
    finally:
        engine.dispose()
    assert "a statement" not in stream.getvalue()


def test_console_lines_are_for_people(stream):
    configure_logging(fmt="console", level="INFO", stream=stream)
    trace_id = new_trace_id()
    with bound(trace_id):
        logging.getLogger("draftgate.test").warning("the broker is away")
    (line,) = stream.getvalue().splitlines()
    assert "[warning  ] the broker is away" in line
    assert f"trace_id={trace_id}" in line
    assert not line.startswith("{")


def test_a_second_configuration_replaces_the_first(stream):
    configure_logging(fmt="json", level="INFO", stream=io.StringIO())
    configure_logging(fmt="json", level="WARNING", stream=stream)
    assert len(logging.getLogger().handlers) == 1
    logging.getLogger("draftgate.test").info("below the level")
    logging.getLogger("draftgate.test").warning("logged once")
    assert [line["event"] for line in lines(stream)] == ["logged once"]


def test_warnings_become_log_lines(stream):
    configure_logging(fmt="json", level="INFO", stream=stream)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("running as root", UserWarning, stacklevel=1)
    (line,) = lines(stream)
    assert "running as root" in line["event"]
    assert line["logger"] == "py.warnings"


def test_an_unknown_format_is_refused(stream):
    with pytest.raises(ValueError, match="json, console"):
        configure_logging(fmt="xml", level="INFO", stream=stream)


def test_jwts_passwords_in_urls_and_byte_headers_are_redacted(stream):
    configure_logging(fmt="json", level="INFO", stream=stream)
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLWJ5dGVz"
    structlog.get_logger("t").info(
        f"verified {jwt}",
        issuer="https://client:p4ssw0rd@idp.example.com/realms/shop",
        headers=[(b"authorization", b"Bearer dg_" + b"Z9" * 12)],
    )
    (line,) = lines(stream)
    text = stream.getvalue()
    assert jwt not in text
    assert "c2lnbmF0dXJl" not in text
    assert "p4ssw0rd" not in text
    assert "Z9Z9" not in text
    assert line["issuer"] == "https://client:[redacted]@idp.example.com/realms/shop"
