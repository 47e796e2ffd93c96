"""Reply families: each module describes one family's markup as a ReplyFormat (data only).

A family module exposes ``NAME`` (llama.cpp's handler name), ``matches(source)`` (llama.cpp's
rule for giving a template that handler) and ``describe(request)``; ``reply/select.py``
registers it in llama.cpp's dispatch order.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import peg

__all__ = ["has_markers", "fenced_json"]


def has_markers(source: str, required: Sequence[str], excluded: Sequence[str] = ()) -> bool:
    """llama.cpp's usual dispatch test: every required marker in the template, no excluded one."""
    return all(m in source for m in required) and not any(m in source for m in excluded)


def fenced_json() -> peg.Parser:
    """A response format's JSON value fenced in ```json ... ``` (spaces allowed inside the
    fence), the value alone tagged as the content: llama.cpp's response-format rule of the
    families that ask for the fence (DeepSeek V3.2, Gemma 4, MiniMax-M3, Ministral)."""
    ws = peg.Space()
    return peg.Seq(
        peg.Literal("```json"), ws, peg.Tag("content", peg.json_value), ws, peg.Literal("```")
    )
