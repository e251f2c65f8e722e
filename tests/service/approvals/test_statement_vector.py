"""The test vector of docs/approvals.md, checked against our code and against the standards.

Every value is parsed out of the page itself, so the page cannot drift from the code: if
someone edits a value there (or the code changes the bytes it signs), a test here fails.
Each value is checked twice: through ``service.signing`` / ``service.canonical``, and
independently with ``cryptography``, ``rfc8785`` and ``hashlib`` directly.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from service.approvals.schemas import (
    STATEMENT_TYPE,
    ApprovalRequest,
    ApprovalStatement,
    Decision,
    build_statement,
)
from service.canonical import canonical_json, params_sha256, sha256_hex
from service.errors import Category, DomainError
from service.signing import (
    b64url,
    key_id_for,
    load_private_key,
    parse_public_key,
    public_key_b64,
    sign,
    verify,
)
from service.validation import parse

DOC = Path(__file__).resolve().parents[3] / "docs" / "approvals.md"


# --- the vector, read out of the page ------------------------------------------------------


def _vector_section() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert "## Test vector" in text, "docs/approvals.md lost its test vector section"
    return text.split("## Test vector", 1)[1]


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text, flags=re.DOTALL)
    assert len(found) == 1, f"expected exactly one match of {pattern!r} in the vector, got {found}"
    return str(found[0])


def _block_after(marker: str, text: str) -> str:
    """The first fenced code block after ``marker``."""
    assert marker in text, f"{marker!r} not found in the vector"
    rest = text.split(marker, 1)[1]
    match = re.search(r"```[a-z]*\n(.*?)\n```", rest, flags=re.DOTALL)
    assert match, f"no code block after {marker!r}"
    return match.group(1)


def load_vector() -> dict[str, Any]:
    section = _vector_section()
    return {
        "seed": bytes.fromhex(_one(r"Ed25519 seed `([0-9a-f]{64})`", section)),
        "pem": _block_after("as PKCS#8 PEM", section) + "\n",
        "public_key": _one(r"Public key \(raw, base64url\): `([A-Za-z0-9_-]+)`", section),
        "key_id": _one(r"key id `(ed25519-[0-9a-f]+)`", section),
        "params_text": _one(r"Params `(\{.*?\})`\s*\ncanonicalise to", section),
        "params_jcs": _block_after("canonicalise to", section).encode("utf-8"),
        "params_sha256": _one(r"whose SHA-256 is `([0-9a-f]{64})`", section),
        "statement_bytes": _block_after("canonical bytes", section).encode("utf-8"),
        "signature": _block_after("Signature (base64url, no padding)", section).strip(),
    }


@pytest.fixture(scope="module")
def vector() -> dict[str, Any]:
    return load_vector()


@pytest.fixture
def pem_file(vector, tmp_path: Path) -> Path:
    path = tmp_path / "vector.pem"
    path.write_text(vector["pem"])
    return path


def test_the_page_yields_every_value_of_the_vector(vector):
    assert len(vector["seed"]) == 32
    assert vector["pem"].startswith("-----BEGIN PRIVATE KEY-----\n")
    assert vector["pem"].rstrip().endswith("-----END PRIVATE KEY-----")
    assert len(vector["public_key"]) == 43  # 32 bytes, base64url without padding
    assert re.fullmatch(r"ed25519-[0-9a-f]{16}", vector["key_id"])
    assert re.fullmatch(r"[A-Za-z0-9_-]{86}", vector["signature"])
    assert b"\n" not in vector["statement_bytes"], "the statement's bytes are one line"
    assert json.loads(vector["params_text"])  # the params are JSON as printed


# --- independently: cryptography + rfc8785 + hashlib, none of our helpers ---------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_independently_the_pem_is_the_pkcs8_encoding_of_the_seed(vector):
    from_seed = Ed25519PrivateKey.from_private_bytes(vector["seed"])
    pem = from_seed.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert pem.decode() == vector["pem"]
    loaded = serialization.load_pem_private_key(vector["pem"].encode(), password=None)
    assert isinstance(loaded, Ed25519PrivateKey)
    raw = loaded.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    assert raw == vector["seed"]


def test_independently_the_public_key_and_key_id_follow_from_the_seed(vector):
    public = Ed25519PrivateKey.from_private_bytes(vector["seed"]).public_key()
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert _b64url(raw) == vector["public_key"]
    assert _b64url_decode(vector["public_key"]) == raw
    assert "ed25519-" + hashlib.sha256(raw).hexdigest()[:16] == vector["key_id"]


def test_independently_the_params_canonicalise_and_hash_as_documented(vector):
    params = json.loads(vector["params_text"])
    assert rfc8785.dumps(params) == vector["params_jcs"]
    assert hashlib.sha256(vector["params_jcs"]).hexdigest() == vector["params_sha256"]


def test_independently_the_statement_bytes_are_canonical_and_bound_to_the_vector(vector):
    statement = json.loads(vector["statement_bytes"])
    # Already canonical: re-encoding with JCS gives back exactly the same bytes.
    assert rfc8785.dumps(statement) == vector["statement_bytes"]
    assert statement["type"] == "draftgate.approval.v1"
    assert statement["params_sha256"] == vector["params_sha256"]
    assert statement["key_id"] == vector["key_id"]
    assert statement["decision"] == "approve"
    assert "reason" not in statement


def test_independently_the_signature_is_ed25519_over_the_statement_bytes(vector):
    key = Ed25519PrivateKey.from_private_bytes(vector["seed"])
    # Ed25519 is deterministic: signing the same bytes gives the documented signature.
    assert _b64url(key.sign(vector["statement_bytes"])) == vector["signature"]
    signature = _b64url_decode(vector["signature"])
    assert len(signature) == 64
    public = Ed25519PublicKey.from_public_bytes(_b64url_decode(vector["public_key"]))
    public.verify(signature, vector["statement_bytes"])  # raises if it does not verify
    with pytest.raises(InvalidSignature):
        public.verify(
            signature, vector["statement_bytes"].replace(b'"revision":2', b'"revision":3')
        )


# --- our code reproduces every value -------------------------------------------------------


def test_our_signing_module_loads_the_pem_and_derives_public_key_and_key_id(vector, pem_file):
    key = load_private_key(pem_file)
    assert public_key_b64(key) == vector["public_key"]
    assert public_key_b64(key.public_key()) == vector["public_key"]
    assert key_id_for(vector["public_key"]) == vector["key_id"]
    assert b64url(parse_public_key(vector["public_key"])) == vector["public_key"]


def test_our_canonical_module_reproduces_the_params_jcs_and_digest(vector):
    params = json.loads(vector["params_text"])
    assert canonical_json(params) == vector["params_jcs"]
    assert params_sha256(params) == vector["params_sha256"]
    assert sha256_hex(vector["params_jcs"]) == vector["params_sha256"]


def test_our_statement_model_and_builder_reproduce_the_canonical_bytes(vector):
    parsed = parse(ApprovalStatement, json.loads(vector["statement_bytes"]))
    assert canonical_json(parsed.signed_value()) == vector["statement_bytes"]
    built = build_statement(
        tenant=parsed.tenant,
        draft_id=parsed.draft_id,
        revision=parsed.revision,
        action=parsed.action,
        contract_version=parsed.contract_version,
        params_sha256=params_sha256(json.loads(vector["params_text"])),
        decision=Decision.APPROVE,
        approver=parsed.approver,
        key_id=key_id_for(vector["public_key"]),
        issued_at=parsed.issued_at,
        source_revision=parsed.source_revision,
    )
    assert canonical_json(built) == vector["statement_bytes"]
    assert built["type"] == STATEMENT_TYPE


def test_our_sign_reproduces_the_signature_and_verify_accepts_it(vector, pem_file):
    key = load_private_key(pem_file)
    assert sign(key, vector["statement_bytes"]) == vector["signature"]
    assert verify(vector["public_key"], vector["statement_bytes"], vector["signature"])


def test_our_verify_refuses_other_bytes_other_keys_and_altered_signatures(vector):
    message, signature = vector["statement_bytes"], vector["signature"]
    assert not verify(vector["public_key"], message.replace(b"alice", b"alicf"), signature)
    other = public_key_b64(Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33))))
    assert not verify(other, message, signature)
    flipped = ("B" if signature[0] != "B" else "C") + signature[1:]
    assert not verify(vector["public_key"], message, flipped)
    assert not verify(vector["public_key"], message, signature + "==")  # padding is not allowed
    assert not verify(vector["public_key"], message, signature[:-1])


def test_the_documented_request_body_parses(vector):
    body = {"statement": json.loads(vector["statement_bytes"]), "signature": vector["signature"]}
    request = parse(ApprovalRequest, body)
    assert request.signature == vector["signature"]
    assert canonical_json(request.statement.signed_value()) == vector["statement_bytes"]


def test_the_documented_members_are_exactly_the_statement_model_fields():
    text = DOC.read_text(encoding="utf-8").split("## The statement", 1)[1].split("##", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_0-9]+)` \|", text, flags=re.MULTILINE))
    assert documented == set(ApprovalStatement.model_fields)


# --- ApprovalStatement is strict -------------------------------------------------------------


def _statement(**changes: Any) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(load_vector()["statement_bytes"])
    statement.update(changes)
    return {name: value for name, value in statement.items() if value is not _DROP}


_DROP = object()


def _invalid(statement: dict[str, Any]) -> DomainError:
    with pytest.raises(DomainError) as caught:
        parse(ApprovalStatement, statement)
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.category is Category.INVALID_ARGUMENT
    assert caught.value.retryable is False
    return caught.value


def test_the_vector_statement_itself_is_valid():
    parsed = parse(ApprovalStatement, _statement())
    assert parsed.decision is Decision.APPROVE
    assert parsed.reason is None


def test_an_unknown_member_is_invalid():
    error = _invalid(_statement(comment="looks fine"))
    assert "comment" in error.message


@pytest.mark.parametrize(
    "member", sorted(set(ApprovalStatement.model_fields) - {"reason", "source_revision"})
)
def test_every_required_member_is_required(member):
    error = _invalid(_statement(**{member: _DROP}))
    assert member in error.message


def test_an_approval_carrying_a_reason_is_invalid():
    error = _invalid(_statement(reason="because"))
    assert "reason" in error.message


def test_a_rejection_without_a_reason_is_invalid():
    error = _invalid(_statement(decision="reject"))
    assert "reason" in error.message


def test_a_rejection_with_a_reason_is_valid_and_signs_the_reason():
    parsed = parse(ApprovalStatement, _statement(decision="reject", reason="duplicate refund"))
    assert parsed.decision is Decision.REJECT
    assert b'"reason":"duplicate refund"' in canonical_json(parsed.signed_value())


@pytest.mark.parametrize("reason", ["", "x" * 2001])
def test_a_rejection_reason_is_bounded(reason):
    _invalid(_statement(decision="reject", reason=reason))


def test_a_rejection_reason_of_2000_characters_is_accepted():
    parsed = parse(ApprovalStatement, _statement(decision="reject", reason="x" * 2000))
    assert parsed.reason == "x" * 2000


def test_a_null_reason_is_not_an_omitted_reason():
    _invalid(_statement(reason=None))


@pytest.mark.parametrize(
    "issued_at",
    [
        "2026-11-29T10:00:00",  # no zone
        "2026-11-29T10:00:00+00:00",  # an offset, not Z
        "2026-11-29T11:00:00+01:00",
        "2026-11-29t10:00:00z",  # lower case
        "2026-11-29 10:00:00Z",  # space instead of T
        "2026-11-29T10:00Z",  # no seconds
        "2026-11-29",
        "2026-11-29T10:00:00.1234567Z",  # more than 6 fraction digits
        "2026-11-29T10:00:00.Z",
        "1764410400",
        "",
    ],
)
def test_a_badly_formatted_issued_at_is_invalid(issued_at):
    error = _invalid(_statement(issued_at=issued_at))
    assert "issued_at" in error.message


@pytest.mark.parametrize(
    "issued_at",
    [
        "2026-02-30T10:00:00Z",  # February has no 30th
        "2026-13-01T10:00:00Z",  # no 13th month
        "2026-11-29T24:00:00Z",
        "2026-11-29T10:61:00Z",
    ],
)
def test_an_impossible_issued_at_is_invalid(issued_at):
    """The pattern alone accepts these; a date that does not exist must still be refused here,
    not later (where ``datetime.fromisoformat`` raises a ValueError the API does not map)."""
    error = _invalid(_statement(issued_at=issued_at))
    assert "issued_at" in error.message


@pytest.mark.parametrize("issued_at", ["2026-11-29T10:00:00Z", "2026-11-29T10:00:00.123456Z"])
def test_issued_at_in_utc_with_up_to_six_fraction_digits_is_valid(issued_at):
    assert parse(ApprovalStatement, _statement(issued_at=issued_at)).issued_at == issued_at


@pytest.mark.parametrize(
    "draft_id",
    [
        "dft_0123456789ABCDEF0123456789ABCDEF",  # upper-case hex
        "dft_0123456789abcdef0123456789abcde",  # 31 digits
        "dft_0123456789abcdef0123456789abcdef0",  # 33 digits
        "drf_0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
        "dft_0123456789abcdef0123456789abcdeg",
        " dft_0123456789abcdef0123456789abcdef",
        "dft_0123456789abcdef0123456789abcdef\n",
    ],
)
def test_a_draft_id_not_matching_its_pattern_is_invalid(draft_id):
    error = _invalid(_statement(draft_id=draft_id))
    assert "draft_id" in error.message


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("type", "draftgate.approval.v2"),
        ("revision", "2"),  # no coercion from strings
        ("revision", 2.0),
        ("revision", True),
        ("revision", 0),
        ("contract_version", "1"),
        ("contract_version", 0),
        ("params_sha256", "609ED5186AC5CB60577BDE2B3890870087783E6FC7EC22B626FE7D1E46B03C23"),
        ("params_sha256", "609ed5186ac5cb60"),
        ("decision", "approved"),
        ("decision", "APPROVE"),
        ("approver", ""),
        ("tenant", ""),
        ("key_id", ""),
        ("approver", ["alice"]),
    ],
)
def test_members_are_strictly_typed(member, value):
    error = _invalid(_statement(**{member: value}))
    assert member in error.message


def test_a_request_body_is_strict_too():
    statement = _statement()
    signature = load_vector()["signature"]
    parse(ApprovalRequest, {"statement": statement, "signature": signature})
    for body in (
        {"statement": statement},
        {"signature": signature},
        {"statement": statement, "signature": signature, "extra": 1},
        {"statement": statement, "signature": signature + "="},
        {"statement": statement, "signature": signature[:-1]},
        {"statement": statement, "signature": signature.replace(signature[5], "+", 1)},
        {"statement": json.dumps(statement), "signature": signature},
    ):
        with pytest.raises(DomainError) as caught:
            parse(ApprovalRequest, body)
        assert caught.value.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("last", ["B", "C", "P"])
def test_a_non_canonical_spelling_of_the_signature_is_refused(vector, last):
    """86 base64url characters carry 516 bits for a 64-byte signature: the last character's
    4 low bits are padding and must be zero. ``b64url_decode`` promises strictness, so another
    spelling of the same bytes is not the documented encoding and must not verify."""
    signature = vector["signature"]
    assert signature[-1] == "A"  # the documented spelling has zero padding bits
    respelled = signature[:-1] + last
    assert _b64url_decode(respelled) == _b64url_decode(signature)  # the same 64 bytes
    assert not verify(vector["public_key"], vector["statement_bytes"], respelled)
