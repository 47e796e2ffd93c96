"""LFM2.5: llama.cpp's "LFM2.5" handler, which reads replies as its "LFM2" handler does.

It gets the templates that list tools as ``List of tools: [`` without LFM2's
``<|tool_list_start|>`` markers; the reply format is LFM2's (``lfm2.py``) under this name.
"""

from __future__ import annotations

from dataclasses import replace

from ..description import (
    ReplyFormat,
)
from ..request import ReplyRequest
from . import has_markers, lfm2

__all__ = ["NAME", "matches", "describe", "grammar"]

NAME = "LFM2.5"
REQUIRED = ("List of tools: [",)
EXCLUDED = ("<|tool_list_start|>",)


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED, EXCLUDED)


def describe(request: ReplyRequest) -> ReplyFormat:
    fmt = lfm2.reply_format(NAME, request)
    return replace(fmt, constraint=lfm2.constraint_for(request, tool_list_tokens=False))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request: LFM2's (``lfm2.grammar``)."""
    return lfm2.grammar(request)
