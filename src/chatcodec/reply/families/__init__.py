"""Reply families: each module describes one family's markup as a ReplyFormat (data only).

A family module exposes ``NAME`` (llama.cpp's handler name), ``matches(source)`` (llama.cpp's
rule for giving a template that handler) and ``describe(request)``; ``reply/select.py``
registers it in llama.cpp's dispatch order.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["has_markers"]


def has_markers(source: str, required: Sequence[str], excluded: Sequence[str] = ()) -> bool:
    """llama.cpp's usual dispatch test: every required marker in the template, no excluded one."""
    return all(m in source for m in required) and not any(m in source for m in excluded)
