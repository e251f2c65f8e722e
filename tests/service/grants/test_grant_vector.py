"""The grant test vector of docs/approvals.md, read out of the page and checked against the
code and, independently, against RFC 8785 and Ed25519 (``rfc8785``, ``cryptography``)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.canonical import canonical_json
from service.grants.schemas import GrantStatement, grant_id_of
from service.signing import sign, verify
from service.validation import parse
from tests.service.approvals.test_statement_vector import DOC, load_vector


def grant_vector() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Grant test vector", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)\n```", section, flags=re.DOTALL)
    assert len(blocks) == 2, "the grant vector has its bytes and its signature"
    words = re.search(r'the grant\s+"(.*?)"\s+has', section, flags=re.DOTALL)
    grant_id = re.search(r"the grant id `(grt_[0-9a-f]{32})`", section)
    assert words
    assert grant_id
    return {
        "bytes": blocks[0],
        "signature": blocks[1],
        "grant_id": grant_id.group(1),
        "words": " ".join(words.group(1).split()),
    }


def test_the_grant_vector_is_canonical_and_names_its_id():
    vector = grant_vector()
    statement = json.loads(vector["bytes"])
    assert rfc8785.dumps(statement).decode() == vector["bytes"]
    digest = hashlib.sha256(vector["bytes"].encode()).hexdigest()
    assert vector["grant_id"] == "grt_" + digest[:32] == grant_id_of(statement)


def test_the_grant_vector_parses_and_reads_as_the_page_says():
    vector = grant_vector()
    parsed = parse(GrantStatement, json.loads(vector["bytes"]))
    assert canonical_json(parsed.signed_value()).decode() == vector["bytes"]
    assert parsed.words() == vector["words"]


def test_the_grant_vector_is_signed_by_the_vector_key():
    vector, key = grant_vector(), load_vector()
    seed = Ed25519PrivateKey.from_private_bytes(key["seed"])
    signed = vector["bytes"].encode()
    expected = base64.urlsafe_b64encode(seed.sign(signed)).rstrip(b"=").decode()
    assert vector["signature"] == expected == sign(seed, signed)
    assert verify(key["public_key"], signed, vector["signature"])
    assert not verify(key["public_key"], signed.replace(b"2000", b"9000"), vector["signature"])
