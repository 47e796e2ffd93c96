"""Small string helpers shared across chatcodec."""

from __future__ import annotations

__all__ = ["common_prefix_length"]


def common_prefix_length(a: str, b: str, known: int = 0) -> int:
    """How many leading characters ``a`` and ``b`` share (``len(os.path.commonprefix([a,
    b]))``), comparing slices in C rather than characters in Python: a long prompt costs a
    few slice comparisons, not a Python step per character. ``known``: a length they are
    known to share (what comes before it is not compared)."""
    high = min(len(a), len(b))
    low = min(known, high)
    if a[low:high] == b[low:high]:
        return high
    while high - low > 1:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low
