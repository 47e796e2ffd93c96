"""Small string helpers shared across chatcodec."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["common_prefix_length", "longest_match"]


def common_prefix_length(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share (``len(os.path.commonprefix([a,
    b]))``), comparing slices in C rather than characters in Python: a long prompt costs a
    few slice comparisons, not a Python step per character."""
    high = min(len(a), len(b))
    if a[:high] == b[:high]:
        return high
    low = 0
    while high - low > 1:  # a[:low] == b[:low] and a[:high] != b[:high]
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def longest_match(texts: list[str]) -> str:
    """A regular expression matching the longest of ``texts`` that starts where it is
    tried, as a trie: a tokenizer with thousands of added tokens (``<unused123>``) would
    have each tried in turn at every ``<`` of the text."""
    trie: dict[str, Any] = {}
    for text in texts:
        node = trie
        for char in text:
            node = node.setdefault(char, {})
        node[""] = {}  # a text ends here

    def pattern(node: dict[str, Any]) -> str:
        branches = [re.escape(char) + pattern(child) for char, child in node.items() if char]
        if not branches:
            return ""
        inner = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if "" in node:  # a shorter text ends here: the longer ones are tried first
            return f"(?:{inner})?"
        return inner

    return pattern(trie)
