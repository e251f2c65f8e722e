"""The passkey test vector of docs/approvals.md, checked against our code, the ``webauthn``
library and the standards.

Every value is read out of the page, so the page cannot drift from the code. Each is checked
independently (``cryptography``, ``cbor2``, ``rfc8785``, ``hashlib``) and through our own
``service.keys.assertions``, which must accept the vector and refuse every altered form.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import cbor2
import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from webauthn.helpers import decode_credential_public_key

from service.approvals.schemas import ApprovalRequest
from service.canonical import canonical_json
from service.keys.assertions import (
    Assertion,
    AssertionRefused,
    RelyingParty,
    challenge_for,
    verify_assertion,
)
from service.keys.passkeys import key_id_for_credential
from service.validation import parse
from tests.service.approvals.test_statement_vector import load_vector as load_ed25519_vector

DOC = Path(__file__).resolve().parents[3] / "docs" / "approvals.md"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert "### Passkey test vector" in text, "docs/approvals.md lost its passkey test vector"
    return text.split("### Passkey test vector", 1)[1].split("\n## ", 1)[0]


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, flags=re.DOTALL)
    assert len(found) == 1, f"expected exactly one match of {pattern!r}, got {found}"
    return str(found[0])


def _block_after(marker: str, text: str) -> str:
    assert marker in text, f"{marker!r} not found in the passkey vector"
    match = re.search(r"```[a-z]*\n(.*?)\n```", text.split(marker, 1)[1], flags=re.DOTALL)
    assert match, f"no code block after {marker!r}"
    return match.group(1)


@pytest.fixture(scope="module")
def vector() -> dict[str, Any]:
    section = _section()
    return {
        "scalar": int(_one(r"private scalar\s+`([0-9a-f]{64})`", section), 16),
        "pem": _block_after("as PKCS#8 PEM", section) + "\n",
        "cose": _one(r"COSE public key \(base64url\): `([A-Za-z0-9_-]+)`", section),
        "credential_id": _one(r"Credential id \(base64url\): `([A-Za-z0-9_-]+)`", section),
        "key_id": _one(r"passkey key id\s+`(passkey-[0-9a-f]{16})`", section),
        "rp_id": _one(r"Relying party id `([^`]+)`", section),
        "origin": _one(r"origin\s+`(https://[^`]+)`", section),
        "statement_bytes": _block_after("its canonical bytes", section).encode(),
        "challenge_hex": _one(r"hex `([0-9a-f]{64})`", section),
        "challenge_b64": _one(r"base64url `([A-Za-z0-9_-]{43})`", section),
        "authenticator_data": bytes.fromhex(_block_after("counter 7), hex", section)),
        "client_data": _block_after("Client data JSON (these exact bytes)", section).encode(),
        "signature": _block_after("base64url:", section).strip(),
    }


def private_key(vector: dict[str, Any]) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(vector["scalar"], ec.SECP256R1())


def signed_data(vector: dict[str, Any]) -> bytes:
    return vector["authenticator_data"] + hashlib.sha256(vector["client_data"]).digest()


def assertion(vector: dict[str, Any], **changes: str) -> Assertion:
    values = {
        "credential_id": vector["credential_id"],
        "authenticator_data": _b64url(vector["authenticator_data"]),
        "client_data_json": _b64url(vector["client_data"]),
        "signature": vector["signature"],
        **changes,
    }
    return Assertion(**values)


def party(vector: dict[str, Any]) -> RelyingParty:
    return RelyingParty(rp_id=vector["rp_id"], origins=(vector["origin"],))


def verify(vector: dict[str, Any], **kwargs: Any) -> int:
    options: dict[str, Any] = {
        "signed_bytes": vector["statement_bytes"],
        "credential_id": vector["credential_id"],
        "public_key": vector["cose"],
        "relying_party": party(vector),
        "sign_count": 6,
        **kwargs,
    }
    given = options.pop("assertion", None) or assertion(vector)
    return verify_assertion(given, **options)


# --- independently ---------------------------------------------------------------------------


def test_independently_the_pem_and_the_cose_key_are_the_documented_p256_key(vector):
    key = private_key(vector)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert pem.decode() == vector["pem"]
    numbers = key.public_key().public_numbers()
    cose = cbor2.loads(_b64url_decode(vector["cose"]))
    assert cose == {
        1: 2,
        3: -7,
        -1: 1,
        -2: numbers.x.to_bytes(32, "big"),
        -3: numbers.y.to_bytes(32, "big"),
    }
    decoded = decode_credential_public_key(_b64url_decode(vector["cose"]))
    assert int(decoded.alg) == -7


def test_independently_the_key_id_follows_from_the_credential_id(vector):
    raw = _b64url_decode(vector["credential_id"])
    assert raw == bytes(range(16))
    assert "passkey-" + hashlib.sha256(raw).hexdigest()[:16] == vector["key_id"]
    assert key_id_for_credential(vector["credential_id"]) == vector["key_id"]


def test_independently_the_statement_is_the_ed25519_vectors_with_the_passkey_key_id(vector):
    statement = json.loads(vector["statement_bytes"])
    assert rfc8785.dumps(statement) == vector["statement_bytes"]
    ed25519 = json.loads(load_ed25519_vector()["statement_bytes"])
    assert statement == {**ed25519, "key_id": vector["key_id"]}


def test_independently_the_challenge_is_the_sha256_of_the_statement(vector):
    digest = hashlib.sha256(vector["statement_bytes"]).digest()
    assert digest.hex() == vector["challenge_hex"]
    assert _b64url(digest) == vector["challenge_b64"]
    client = json.loads(vector["client_data"])
    assert client == {
        "type": "webauthn.get",
        "challenge": vector["challenge_b64"],
        "origin": vector["origin"],
        "crossOrigin": False,
    }


def test_independently_the_authenticator_data_names_the_rp_flags_and_counter(vector):
    data = vector["authenticator_data"]
    assert len(data) == 37
    assert data[:32] == hashlib.sha256(vector["rp_id"].encode()).digest()
    assert data[32] == 0x05  # user present (0x01) and user verified (0x04)
    assert int.from_bytes(data[33:], "big") == 7


def test_independently_the_signature_is_es256_over_authenticator_data_and_client_hash(vector):
    public = private_key(vector).public_key()
    signature = _b64url_decode(vector["signature"])
    public.verify(signature, signed_data(vector), ec.ECDSA(hashes.SHA256()))
    deterministic = private_key(vector).sign(
        signed_data(vector), ec.ECDSA(hashes.SHA256(), deterministic_signing=True)
    )
    assert deterministic == signature  # RFC 6979: the vector can be reproduced
    with pytest.raises(InvalidSignature):
        public.verify(signature, signed_data(vector) + b"x", ec.ECDSA(hashes.SHA256()))


# --- our code ------------------------------------------------------------------------------------


def test_our_challenge_is_the_documented_one(vector):
    assert challenge_for(vector["statement_bytes"]).hex() == vector["challenge_hex"]
    statement = json.loads(vector["statement_bytes"])
    assert challenge_for(canonical_json(statement)).hex() == vector["challenge_hex"]


def test_our_verifier_accepts_the_vector_and_returns_its_counter(vector):
    assert verify(vector) == 7
    assert verify(vector, sign_count=0) == 7
    assert verify(vector, sign_count=None) == 7  # the worker's re-verification


@pytest.mark.parametrize(
    ("change", "check"),
    [
        pytest.param({"sign_count": 7}, "sign_count", id="counter-not-increased"),
        pytest.param({"sign_count": 8}, "sign_count", id="counter-went-back"),
        pytest.param(
            {"relying_party": RelyingParty("draftgate.example", ("https://evil.example",))},
            "origin",
            id="another-origin",
        ),
        pytest.param(
            {"relying_party": RelyingParty("evil.example", ("https://draftgate.example",))},
            "rp_id",
            id="another-rp-id",
        ),
        pytest.param({"signed_bytes": b'{"action":"refund"}'}, "challenge", id="another-statement"),
        pytest.param({"credential_id": "AAECAwQFBgcICQoLDA0ODg"}, "credential", id="other-cred"),
    ],
)
def test_our_verifier_refuses_each_broken_rule(vector, change, check):
    with pytest.raises(AssertionRefused) as refused:
        verify(vector, **change)
    assert refused.value.check == check


def test_our_verifier_refuses_another_key_and_altered_bytes(vector):
    other = ec.derive_private_key(vector["scalar"] + 1, ec.SECP256R1())
    numbers = other.public_key().public_numbers()
    other_cose = _b64url(
        cbor2.dumps(
            {
                1: 2,
                3: -7,
                -1: 1,
                -2: numbers.x.to_bytes(32, "big"),
                -3: numbers.y.to_bytes(32, "big"),
            }
        )
    )
    with pytest.raises(AssertionRefused) as refused:
        verify(vector, public_key=other_cose)
    assert refused.value.check == "signature"
    no_uv = bytearray(vector["authenticator_data"])
    no_uv[32] = 0x01
    with pytest.raises(AssertionRefused) as refused:
        verify(vector, assertion=assertion(vector, authenticator_data=_b64url(bytes(no_uv))))
    assert refused.value.check == "user_verification"
    counted = bytearray(vector["authenticator_data"])
    counted[36] = 9  # a higher counter, but not the signed one
    with pytest.raises(AssertionRefused) as refused:
        verify(vector, assertion=assertion(vector, authenticator_data=_b64url(bytes(counted))))
    assert refused.value.check == "signature"


def test_the_documented_request_body_parses(vector):
    body = {
        "statement": json.loads(vector["statement_bytes"]),
        "webauthn": {
            "credential_id": vector["credential_id"],
            "authenticator_data": _b64url(vector["authenticator_data"]),
            "client_data_json": _b64url(vector["client_data"]),
            "signature": vector["signature"],
        },
    }
    request = parse(ApprovalRequest, body)
    assert request.signature is None
    assert request.webauthn is not None
    assert canonical_json(request.statement.signed_value()) == vector["statement_bytes"]
