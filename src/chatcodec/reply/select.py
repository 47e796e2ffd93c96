"""Template + request options -> the reply format llama.cpp would build for them.

``FAMILIES`` is llama.cpp's dispatch: its handlers in the order it tries them, the auto parser
last (it takes every template). Each entry is a module with the same interface (``Family``);
adding a family is adding its module and one line here.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Protocol

from . import auto
from .description import ReplyFormat
from .families import (
    cohere2_moe,
    deepseek_dsml,
    functionary_v32,
    gemma4,
    gigachat_v3,
    gpt_oss,
    kimi_k2,
    kimi_k3,
    lfm2,
    lfm25,
    ling3,
    minicpm5,
    minimax_m3,
    ministral,
    muse_glimmer,
    qwen3_coder,
)
from .request import ReplyRequest

__all__ = ["Family", "FAMILIES", "family_for", "handler_for", "describe"]


class Family(Protocol):
    """A reply family: llama.cpp's handler name, its dispatch rule, its reply format."""

    NAME: str

    def matches(self, source: str) -> bool: ...

    def describe(self, request: ReplyRequest) -> ReplyFormat: ...

    def grammar(self, request: ReplyRequest) -> str: ...


FAMILIES: tuple[Family, ...] = (
    ministral,
    gpt_oss,
    muse_glimmer,
    functionary_v32,
    kimi_k2,
    kimi_k3,
    ling3,
    cohere2_moe,
    lfm2,
    lfm25,
    gigachat_v3,
    minimax_m3,
    deepseek_dsml,
    gemma4,
    minicpm5,
    qwen3_coder,
    auto,
)


def family_for(source: str) -> Family:
    """The family llama.cpp gives a template: the first in its dispatch order that matches."""
    return next(family for family in FAMILIES if family.matches(source))


def handler_for(source: str) -> str:
    """Which llama.cpp handler a template gets ("autoparser" when none of the specialized)."""
    return family_for(source).NAME


def describe(request: ReplyRequest) -> ReplyFormat:
    """The reply format of a request, built by the family its template gets; where llama.cpp
    sets a grammar, its constraint builds the GBNF text on demand."""
    family = family_for(request.source)
    fmt = family.describe(request)
    if not fmt.constraint.grammar:
        return fmt
    return replace(fmt, constraint=replace(fmt.constraint, gbnf=partial(family.grammar, request)))
