"""The browser's canonical JSON and signature are the server's, byte for byte.

The console's jcs.js and keys.js, as the API serves them, run in Chromium on the test vector
of docs/approvals.md (parsed out of the page) and on values where JCS implementations
usually part ways: numbers in ECMAScript form, escapes, characters beyond U+FFFF in keys
(UTF-16 order), deep nesting; each must equal service.canonical's bytes, and what Python
refuses the browser refuses too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785

from harness.databases import sqlite_copy
from harness.servers import serve
from service.canonical import canonical_json
from service.config import Settings
from service.runtime import build_runtime
from tests.service.approvals.test_statement_vector import load_vector

pytestmark = pytest.mark.full

# Each is a JSON text (as a draft's params reach the page): the browser parses and encodes it.
TRICKY_VALUES: list[Any] = [
    # RFC 8785 §3.2.2.3 and its appendix: the numbers JCS was written for.
    [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
    [0.1, 0.2, 0.30000000000000004, 1e21, 1e20, 1e-6, 1e-7, 5e-324, 1.7976931348623157e308],
    [-0.0, 0, -1, 9007199254740991, -9007199254740991, 123456789.125, 1e23, 4.35, 100.0],
    {"string": '\u20ac$\u000f\nA\'B"\\\\"/', "literals": [None, True, False]},
    [
        "\u0000\u0001\u001f\b\f\n\r\t",
        "\u007f\u0080\u2028\u2029",
        "</script><!--",
        "\u00e9",
        "e\u0301",
    ],
    # Keys beyond U+FFFF sort by UTF-16 code units: U+1F600 (D83D DE00) before U+E000.
    {"\ue000": 1, "\U0001f600": 2, "a": 3, "B": 4, "": 5, "\u00e9": 6, "e\u0301": 7},
    {"\U0001f600": "\U0001f600 \u202e bidi \u2066 isolate \u2069", "\u05d0": "\u05d0\u05d1"},
    {"b": {"d": [1, {"z": [], "y": {}}], "c": None}, "a": [[[[[[["deep"]]]]]]]},
    {"order_id": "ORD-1004", "amount": {"amount_minor": 2500, "currency": "USD"}},
    "just a string",
    12.5,
    [],
    {},
]
# What RFC 8785 refuses: a lone surrogate in a value and in a key.
REFUSED = ['"\\ud800"', '{"\\udc00": 1}', '["ok", "\\udbff x"]']

CANONICALIZE = """async ([texts]) => {
  const { canonicalize } = await import("/console/static/js/jcs.js");
  return texts.map((text) => {
    try { return { ok: canonicalize(JSON.parse(text)) }; }
    catch (error) { return { refused: error.name + ": " + error.message }; }
  });
}"""

VECTOR = """async ([pem, params, statement, keyId]) => {
  const jcs = await import("/console/static/js/jcs.js");
  const keys = await import("/console/static/js/keys.js");
  const record = await keys.importPem(pem, {
    tenant: "demo", subject: "alice", expectedKeyId: keyId,
  });
  const again = await keys.storedKey("demo", "alice");
  let exported = null;
  try { await crypto.subtle.exportKey("pkcs8", again.private_key); exported = "exported"; }
  catch (error) { exported = error.name; }
  return {
    params_jcs: jcs.canonicalize(params),
    params_sha256: await jcs.sha256Hex(jcs.canonicalBytes(params)),
    statement_jcs: jcs.canonicalize(statement),
    key_id: record.key_id,
    public_key: record.public_key,
    extractable: again.private_key.extractable,
    exported,
    signature: await keys.signWith(again, jcs.canonicalBytes(statement)),
  };
}"""


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[str]:
    """The real API (its console, its CSP) for the whole module; JCS needs no stack."""
    from service.api.app import create_app

    root = tmp_path_factory.mktemp("jcs")
    settings = Settings(
        state_dir=root / "state", database_url=sqlite_copy(sqlite_template, root / "db.sqlite")
    )
    runtime = build_runtime(settings)
    try:
        with serve(create_app(runtime)) as base:
            yield base
    finally:
        runtime.engine.dispose()


@pytest.fixture
def console_page(browser: Any, console_url: str) -> Iterator[Any]:
    """A page of the console in a fresh context (its own IndexedDB)."""
    context = browser.new_context(base_url=console_url)
    try:
        page = context.new_page()
        response = page.goto("/console/sign-in")
        assert response is not None
        assert response.ok
        yield page
    finally:
        context.close()


def test_the_browser_signs_the_test_vector_of_the_approvals_page(console_page):
    vector = load_vector()
    statement = json.loads(vector["statement_bytes"])
    result = console_page.evaluate(
        VECTOR, [vector["pem"], json.loads(vector["params_text"]), statement, vector["key_id"]]
    )
    assert result["params_jcs"].encode() == vector["params_jcs"]
    assert result["params_sha256"] == vector["params_sha256"]
    assert result["statement_jcs"].encode() == vector["statement_bytes"]
    assert result["key_id"] == vector["key_id"]
    assert result["public_key"] == vector["public_key"]
    # Stored non-extractable: the page can sign with it, nothing can read it back.
    assert result["extractable"] is False
    assert result["exported"] == "InvalidAccessError"
    assert result["signature"] == vector["signature"]  # Ed25519 is deterministic


def test_an_imported_key_must_be_the_key_id_the_approver_named(console_page):
    vector = load_vector()
    refused = console_page.evaluate(
        """async ([pem]) => {
          const keys = await import("/console/static/js/keys.js");
          try {
            await keys.importPem(pem, {tenant: "demo", subject: "alice",
                                       expectedKeyId: "ed25519-0000000000000000"});
            return null;
          } catch (error) { return error.message; }
        }""",
        [vector["pem"]],
    )
    assert refused == f"this file holds key {vector['key_id']}, not ed25519-0000000000000000"


def test_the_browser_canonicalises_tricky_values_as_python_does(console_page):
    texts = [json.dumps(value) for value in TRICKY_VALUES]
    results = console_page.evaluate(CANONICALIZE, [texts])
    for value, result in zip(TRICKY_VALUES, results, strict=True):
        assert result == {"ok": canonical_json(value).decode()}, value


def test_the_browser_refuses_what_jcs_refuses(console_page):
    results = console_page.evaluate(CANONICALIZE, [REFUSED])
    for text, result in zip(REFUSED, results, strict=True):
        with pytest.raises((ValueError, rfc8785.CanonicalizationError)):
            canonical_json(json.loads(text))
        assert result == {"refused": "CanonicalError: string holds a lone surrogate"}, text
