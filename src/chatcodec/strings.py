"""Small string helpers shared across chatcodec."""

from __future__ import annotations

__all__ = ["common_prefix_length"]


def common_prefix_length(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share (``len(os.path.commonprefix([a,
    b]))``), comparing slices in C rather than characters in Python: a long prompt costs a
    few slice comparisons, not a Python step per character."""
    low, high = 0, min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    while high - low > 1:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low
