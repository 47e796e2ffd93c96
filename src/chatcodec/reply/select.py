"""Template + request options -> the reply format llama.cpp would build for them.

``FAMILIES`` is llama.cpp's dispatch: its handlers in the order it tries them, the auto parser
last (it takes every template). Each entry is a module with the same interface (``Family``);
adding a family is adding its module and one line here.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache, partial
from typing import Any, Protocol

from ..template.environment import Limits
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

__all__ = [
    "Family",
    "FAMILIES",
    "GRAMMAR_CACHE_SIZE",
    "family_for",
    "handler_for",
    "describe",
    "grammar_text",
    "clear_grammar_cache",
    "template_context",
]

# how many grammar texts are kept (per process): one per template, tool set and options
GRAMMAR_CACHE_SIZE = 256


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


@lru_cache(maxsize=256)
def family_for(source: str) -> Family:
    """The family llama.cpp gives a template: the first in its dispatch order that matches
    (kept per template: matching searches its text for the markers of every family, which
    cost as much as rendering a short request)."""
    return next(family for family in FAMILIES if family.matches(source))


def handler_for(source: str) -> str:
    """Which llama.cpp handler a template gets ("autoparser" when none of the specialized)."""
    return family_for(source).NAME


def describe(request: ReplyRequest) -> ReplyFormat:
    """The reply format of a request, built by the family its template gets; where llama.cpp
    sets a grammar, its constraint builds the GBNF text on demand."""
    family = family_for(request.source)
    fmt = family.describe(request)
    if request.policy != fmt.policy:
        fmt = replace(fmt, policy=request.policy)
    if not fmt.constraint.grammar:
        return fmt
    return replace(
        fmt, constraint=replace(fmt.constraint, build_gbnf=partial(grammar_text, family, request))
    )


def grammar_text(family: Family, request: ReplyRequest) -> str:
    """``family.grammar(request)``, kept in a bounded LRU cache keyed by every field of the
    request as written: the tools' and schemas' JSON text in their own key order (a schema's
    property order shapes the grammar). A request whose fields are not JSON is not cached."""
    key = _grammar_key(family, request)
    if key is None:
        return family.grammar(request)
    return _cached_grammar(_Keyed(key, family, request))


def clear_grammar_cache() -> None:
    """Forget every cached grammar text (the next request derives its grammar again)."""
    _cached_grammar.cache_clear()


def _grammar_key(family: Family, request: ReplyRequest) -> tuple[Hashable, ...] | None:
    key: list[Hashable] = [family.NAME]
    for f in fields(request):
        value: Any = getattr(request, f.name)
        if isinstance(value, (Mapping, list, tuple)):
            try:
                value = json.dumps(value, ensure_ascii=False)
            except (TypeError, ValueError):
                return None
        elif not isinstance(value, (str, bool, type(None), Limits)):  # (Limits: frozen)
            return None
        # the type too: True and 1 are equal keys, not equal requests
        key += [type(value).__name__, value]
    return tuple(key)


@dataclass(frozen=True, eq=False)
class _Keyed:
    """A request as a cache key: equal when the keys are (the request rides along)."""

    key: tuple[Hashable, ...]
    family: Family
    request: ReplyRequest

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and self.key == other.key


@lru_cache(maxsize=GRAMMAR_CACHE_SIZE)
def _cached_grammar(keyed: _Keyed) -> str:
    return keyed.family.grammar(keyed.request)


def template_context(source: str, json_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """What llama.cpp adds to the template's context for a request (DeepSeek V4 is given the
    response format's schema as ``response_format``); nothing for most families."""
    extra = getattr(family_for(source), "template_context", None)
    return extra(source, json_schema) if extra is not None else {}
