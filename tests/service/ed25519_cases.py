"""Ed25519 edge cases built from first principles, for the strict-verification tests.

We found no npm or PyPI package that ships the test vectors of "Taming the many EdDSAs"
(Chalkias, Garillot, Nikolaenko, 2020; novifinancial/ed25519-speccheck), and nothing fetched
may be committed, so this module builds the paper's twelve cases itself, from their
definitions (the paper's table: which of A and R is small-order, mixed-order or of order L,
whether S < L, which encoding is non-canonical and what is hashed). It also enumerates
every small-order point and every non-canonical encoding of a point from the curve's
equation.

The arithmetic below is a *reference* for tests only (textbook twisted-Edwards formulas, slow
and not constant-time): it builds inputs and judges them with the textbook equations, so
each case is shown to be what it claims before draftgate's verifier (libsodium) is asked.
Production code never does curve arithmetic by hand (service/signing.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # the prime order of the base point
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int]  # affine (x, y)
IDENTITY: Point = (0, 1)
_Extended = tuple[int, int, int, int]  # (X, Y, Z, T): x = X/Z, y = Y/Z, xy = T/Z


def _inv(value: int) -> int:
    return pow(value, P - 2, P)


def _extended(p: Point) -> _Extended:
    return (p[0], p[1], 1, p[0] * p[1] % P)


def _affine(e: _Extended) -> Point:
    z = _inv(e[2])
    return (e[0] * z % P, e[1] * z % P)


def _add(p: _Extended, q: _Extended) -> _Extended:
    """The complete (unified) addition law of -x² + y² = 1 + d·x²·y², in extended
    coordinates (Hisil, Wong, Carter, Dawson 2008): no inversion per step."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * D * t1 * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def add(p: Point, q: Point) -> Point:
    return _affine(_add(_extended(p), _extended(q)))


def neg(p: Point) -> Point:
    return (-p[0] % P, p[1])


def mul(n: int, p: Point) -> Point:
    result, addend = _extended(IDENTITY), _extended(p)
    while n:
        if n & 1:
            result = _add(result, addend)
        addend, n = _add(addend, addend), n >> 1
    return _affine(result)


def _sqrt(u: int) -> int | None:
    x = pow(u, (P + 3) // 8, P)
    if x * x % P != u % P:
        x = x * SQRT_M1 % P
    return x if x * x % P == u % P else None


def x_for(y: int, negative: bool) -> int | None:
    """The x with that sign (its low bit) on the curve at ``y``, or None when there is none."""
    y %= P
    x = _sqrt((y * y - 1) * _inv(D * y * y + 1))
    if x is None:
        return None
    return (P - x) % P if (x & 1) != negative else x


def encode(p: Point) -> bytes:
    """The canonical encoding: y (< p) little-endian, the sign of x in the top bit."""
    return (p[1] | (p[0] & 1) << 255).to_bytes(32, "little")


def encode_raw(y: int, sign: int) -> bytes:
    """Any 255-bit y with any sign bit: how a non-canonical encoding is spelled."""
    return (y | sign << 255).to_bytes(32, "little")


def decode_lenient(data: bytes) -> Point | None:
    """Decode as a lax verifier would: y reduced mod p, "-0" accepted as 0."""
    value = int.from_bytes(data, "little")
    y, sign = (value & (2**255 - 1)) % P, value >> 255
    x = x_for(y, bool(sign))
    if x is None:
        return None
    return (x, y)


BASE: Point = (x_for(4 * _inv(5), False) or 0, 4 * _inv(5) % P)


def order_8_point() -> Point:
    """A point of order 8: [L]Q for a curve point Q whose torsion part has order 8."""
    y = 2
    while True:
        x = x_for(y, False)
        if x is not None:
            torsion = mul(L, (x, y))
            if mul(4, torsion) != IDENTITY:
                return torsion
        y += 1


T8 = order_8_point()
SMALL_ORDER_POINTS = [mul(i, T8) for i in range(8)]


def small_order_encodings() -> list[bytes]:
    """The eight small-order points, canonically encoded."""
    return [encode(point) for point in SMALL_ORDER_POINTS]


def non_canonical_encodings() -> list[bytes]:
    """Every non-canonical spelling of a curve point: y + p for each y < 19 on the curve
    (with each sign bit x allows, and "-0" where x is 0), and "-0" on the canonical y
    whose x is 0 (y = p - 1; y = 1 is covered as 1 + p and below)."""
    found = []
    for y in range(19):  # y + p still fits in 255 bits
        for sign in (0, 1):
            x = x_for(y, bool(sign))
            if x is not None and ((x & 1) == sign or x == 0):
                found.append(encode_raw(y + P, sign))
    found.extend(encode_raw(y, 1) for y in (1, P - 1))  # x = 0 with its sign bit set
    return found


def k_of(r_bytes: bytes, a_bytes: bytes, message: bytes) -> int:
    return int.from_bytes(hashlib.sha512(r_bytes + a_bytes + message).digest(), "little") % L


def verifies(
    a_bytes: bytes,
    message: bytes,
    signature: bytes,
    *,
    cofactored: bool,
    hash_reencoded: bool = False,
) -> bool:
    """The textbook equation, judged leniently (any S, any decodable encoding): cofactorless
    [S]B = R + [k]A, or cofactored [8S]B = [8]R + [8k]A. ``hash_reencoded``: k hashes the
    canonical re-encodings of R and A instead of the bytes given."""
    r_bytes, s = signature[:32], int.from_bytes(signature[32:], "little")
    a_point, r_point = decode_lenient(a_bytes), decode_lenient(r_bytes)
    if a_point is None or r_point is None:
        return False
    if hash_reencoded:
        k = k_of(encode(r_point), encode(a_point), message)
    else:
        k = k_of(r_bytes, a_bytes, message)
    left, right = mul(s, BASE), add(r_point, mul(k, a_point))
    if cofactored:
        return mul(8, left) == mul(8, right)
    return left == right


@dataclass(frozen=True)
class Case:
    number: int
    what: str
    public_key: bytes
    message: bytes
    signature: bytes
    cofactorless: bool  # the paper's verdict of a lax cofactorless verifier
    cofactored: bool
    hash_reencoded: bool = False


def _message(case: int, wanted: int, r_bytes: bytes, a_bytes: bytes, modulus: int = 8) -> bytes:
    """The first message, of a fixed family, whose k is ``wanted`` modulo 8 (k mod 8 is what
    a small-order component sees of [k]A); ``wanted`` < 0: anything but 0."""
    counter = 0
    while True:
        message = hashlib.sha256(f"draftgate speccheck {case} {counter}".encode()).digest()
        residue = k_of(r_bytes, a_bytes, message) % modulus
        if residue == wanted or (wanted < 0 and residue != 0):
            return message
        counter += 1


def _sig(r_bytes: bytes, s: int) -> bytes:
    return r_bytes + s.to_bytes(32, "little")


def taming_cases(a: int = 0x2B0F_5A1E_77C3, r: int = 0x51D4_09E2_3B6F) -> list[Case]:
    """The twelve cases of the paper's table of test vectors (speccheck's cases.json),
    rebuilt; ``a`` and ``r`` are the secret and nonce scalars of the order-L parts."""
    t = T8
    mixed_a = add(mul(a, BASE), t)  # aB + T: a key with a small-order component
    cases = []

    # 0: S = 0, A and R small-order: [0]B = R + [k]A with R = -T, A = T, k = 1 (mod 8).
    a0, r0 = encode(t), encode(neg(t))
    m0 = _message(0, 1, r0, a0)
    cases.append(Case(0, "small-order A and R, S = 0", a0, m0, _sig(r0, 0), True, True))

    # 1: small-order A, mixed-order R = rB - T, S = r.
    r1 = encode(add(mul(r, BASE), neg(t)))
    m1 = _message(1, 1, r1, a0)
    cases.append(Case(1, "small-order A, mixed-order R", a0, m1, _sig(r1, r), True, True))

    # 2: mixed-order A, small-order R = -T, S = k·a.
    a2 = encode(mixed_a)
    m2 = _message(2, 1, r0, a2)
    s2 = k_of(r0, a2, m2) * a % L
    cases.append(Case(2, "mixed-order A, small-order R", a2, m2, _sig(r0, s2), True, True))

    # 3: mixed-order A and R whose torsion cancels: valid either way.
    r3 = r1
    m3 = _message(3, 1, r3, a2)
    s3 = (r + k_of(r3, a2, m3) * a) % L
    cases.append(Case(3, "mixed-order A and R, torsion cancels", a2, m3, _sig(r3, s3), True, True))

    # 4: mixed-order A and R = rB + T, k = 0 (mod 8): the torsion T is left over.
    r4 = encode(add(mul(r, BASE), t))
    m4 = _message(4, 0, r4, a2)
    s4 = (r + k_of(r4, a2, m4) * a) % L
    cases.append(Case(4, "mixed-order A and R, cofactored only", a2, m4, _sig(r4, s4), False, True))

    # 5: mixed-order A, R = rB of order L, k != 0 (mod 8): [k]T is left over.
    r5 = encode(mul(r, BASE))
    m5 = _message(5, -1, r5, a2)
    s5 = (r + k_of(r5, a2, m5) * a) % L
    cases.append(Case(5, "mixed-order A, R of order L", a2, m5, _sig(r5, s5), False, True))

    cases.extend(_non_canonical_scalar_cases(a, r))
    cases.extend(_non_canonical_point_cases(a, r, mixed_a))
    return cases


def _non_canonical_scalar_cases(a: int, r: int) -> list[Case]:
    """6, 7: an honest signature whose S is replaced by S + L, or by S + m·L near 2^256."""
    a6, r6 = encode(mul(a, BASE)), encode(mul(r, BASE))
    m6 = hashlib.sha256(b"draftgate speccheck 6").digest()
    s6 = (r + k_of(r6, a6, m6) * a) % L
    large = s6 + ((2**256 - 1 - s6) // L) * L
    return [
        Case(6, "S = S + L (S >= L)", a6, m6, _sig(r6, s6 + L), True, True),
        Case(7, "S = S + m·L (S >> L)", a6, m6, _sig(r6, large), True, True),
    ]


def _non_canonical_point_cases(a: int, r: int, mixed_a: Point) -> list[Case]:
    """8-11: R, then A, is (0, -1) = [4]T spelled with its sign bit set ("-0"); in 8 and 10
    k hashes the canonical re-encoding, in 9 and 11 the bytes as given."""
    t = T8
    order_2 = mul(4, t)
    nc = encode_raw(P - 1, 1)  # (0, -1) with the sign bit set: ec ff … ff
    a8 = encode(mixed_a)
    m8 = _message(8, 4, encode(order_2), a8)  # [4]T + [k]T = 0: k = 4 (mod 8)
    m9 = _message(9, 4, nc, a8)
    s8 = k_of(encode(order_2), a8, m8) * a % L
    s9 = k_of(nc, a8, m9) * a % L
    r10 = encode(add(mul(r, BASE), order_2))  # rB + (0,-1): its torsion cancels for odd k
    m10 = _message(10, 1, r10, encode(order_2), modulus=2)
    m11 = _message(11, 1, r10, nc, modulus=2)
    return [
        Case(8, "non-canonical R, hashed re-encoded", a8, m8, _sig(nc, s8), True, True, True),
        Case(9, "non-canonical R, hashed as given", a8, m9, _sig(nc, s9), True, True),
        Case(10, "non-canonical A, hashed re-encoded", nc, m10, _sig(r10, r), True, True, True),
        Case(11, "non-canonical A, hashed as given", nc, m11, _sig(r10, r), True, True),
    ]
