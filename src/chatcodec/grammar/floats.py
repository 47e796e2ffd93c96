"""A double as nlohmann::json writes it: Grisu2 digits, then its layout.

A ``const`` or ``enum`` number becomes grammar text through nlohmann's ``dump()``. Its digits
come from Grisu2 (Loitsch), which is not always the shortest round-tripping form Python's
``repr`` gives (``6.4700529476634736e+16`` where ``repr`` says ``6.470052947663474e+16``), so
the algorithm is reproduced: 64-bit "do-it-yourself" floats, cached powers of ten, digit
generation and the final rounding step.
"""

from __future__ import annotations

import math
import struct

__all__ = ["format_double"]

_MASK64 = (1 << 64) - 1
_ALPHA = -60
_MIN_DEC_EXP = -300
_DEC_STEP = 8


def _cached_power(k: int) -> tuple[int, int]:
    """10^k as a 64-bit significand (rounded to nearest) and a binary exponent."""
    if k >= 0:
        value = 10**k
        shift = value.bit_length() - 64
        if shift <= 0:
            return value << -shift, shift
        return (value + (1 << (shift - 1))) >> shift, shift
    divisor = 10**-k
    shift = 63 + divisor.bit_length()
    if (1 << shift) // divisor >= 1 << 64:
        shift -= 1
    return ((1 << shift) + divisor // 2) // divisor, -shift


# 10^-300, 10^-292, ..., 10^324: the fixed table Grisu2 picks its scaling power from
_POWERS = tuple(_cached_power(k) for k in range(_MIN_DEC_EXP, 325, _DEC_STEP))


def _mul(f1: int, f2: int) -> int:
    """The upper 64 bits of the product, rounded (ties up)."""
    return ((f1 * f2) + (1 << 63)) >> 64


def _normalize(f: int, e: int) -> tuple[int, int]:
    shift = 64 - f.bit_length()
    return f << shift, e - shift


def _boundaries(value: float) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """v and its neighbours' midpoints m-, m+ (normalised; m- to m+'s exponent)."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    biased, fraction = bits >> 52, bits & ((1 << 52) - 1)
    if biased == 0:
        f, e = fraction, 1 - 1075
    else:
        f, e = fraction + (1 << 52), biased - 1075
    plus_f, plus_e = _normalize(2 * f + 1, e - 1)
    if fraction == 0 and biased > 1:  # the lower neighbour is closer
        minus_f, minus_e = 4 * f - 1, e - 2
    else:
        minus_f, minus_e = 2 * f - 1, e - 1
    minus_f <<= minus_e - plus_e
    return _normalize(f, e), (minus_f, plus_e), (plus_f, plus_e)


def _round_last(digits: list[int], dist: int, delta: int, rest: int, ten_k: int) -> None:
    while (
        rest < dist
        and delta - rest >= ten_k
        and (rest + ten_k < dist or dist - rest > rest + ten_k - dist)
    ):
        digits[-1] -= 1
        rest += ten_k


def _digits(value: float) -> tuple[str, int]:
    """Grisu2: (digits, decimal exponent) with value ~ digits * 10^exponent."""
    (w_f, w_e), (minus_f, _), (plus_f, plus_e) = _boundaries(value)
    f = _ALPHA - plus_e - 1
    k = int(f * 78913 / (1 << 18)) + (f > 0)  # C integer division truncates
    index = (-_MIN_DEC_EXP + k + _DEC_STEP - 1) // _DEC_STEP
    c_f, c_e = _POWERS[index]
    exponent = -(_MIN_DEC_EXP + index * _DEC_STEP)
    w = _mul(w_f, c_f)
    # the products are off by up to one unit: narrow the interval by one on each side
    low = _mul(minus_f, c_f) + 1
    high = _mul(plus_f, c_f) - 1
    one_e = plus_e + c_e + 64
    shift = -one_e
    one_f = 1 << shift

    delta = high - low
    dist = high - w
    p1, p2 = high >> shift, high & (one_f - 1)
    digits: list[int] = []
    n = len(str(p1))
    pow10 = 10 ** (n - 1)
    while n > 0:
        digits.append(p1 // pow10)
        p1 %= pow10
        n -= 1
        rest = (p1 << shift) + p2
        if rest <= delta:
            _round_last(digits, dist, delta, rest, pow10 << shift)
            return "".join(map(str, digits)), exponent + n
        pow10 //= 10
    m = 0
    while True:
        p2 *= 10
        digits.append(p2 >> shift)
        p2 &= one_f - 1
        m += 1
        delta = (delta * 10) & _MASK64
        dist = (dist * 10) & _MASK64
        if p2 <= delta:
            break
    _round_last(digits, dist, delta, p2, one_f)
    return "".join(map(str, digits)), exponent - m


def format_double(value: float) -> str:
    """``value`` as nlohmann::json dumps a double (``null`` when not finite)."""
    if not math.isfinite(value):
        return "null"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    value = abs(value)
    if value == 0:
        return sign + "0.0"
    digits, exponent = _digits(value)
    k, n = len(digits), len(digits) + exponent
    if k <= n <= 15:
        text = digits + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        text = digits[:n] + "." + digits[n:]
    elif -4 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        head = digits if k == 1 else digits[0] + "." + digits[1:]
        text = f"{head}e{'-' if e < 0 else '+'}{abs(e):02d}"
    return sign + text
