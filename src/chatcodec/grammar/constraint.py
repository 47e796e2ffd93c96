"""A request's grammar as the sampler takes it: GBNF text plus llama.cpp's sampler setup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Trigger", "Grammar"]

TriggerType = Literal["word", "pattern", "pattern_full", "token"]


@dataclass(frozen=True)
class Trigger:
    """What wakes a lazy grammar: a ``word`` (literal text), a ``pattern`` (a regex found
    anywhere in the output), a ``pattern_full`` (a regex the whole output must match) or a
    ``token``; ``value`` is llama.cpp's."""

    type: TriggerType
    value: str


@dataclass(frozen=True)
class Grammar:
    """The grammar that makes a model write a reply the parser reads, as llama.cpp sets it.

    ``gbnf``: the grammar (llama.cpp's GBNF; its root starts after the generation prompt's
    tokens the sampler is fed first, or, when ``lazy``, at a trigger). ``lazy``: the sampler is
    free until one of ``triggers`` appears in the output, then constrained from there on.
    ``preserved_tokens``: the special tokens the grammar spells out (the tokenizer must keep
    them whole). ``additional_stops``: extra stop strings.
    """

    gbnf: str
    lazy: bool = False
    triggers: tuple[Trigger, ...] = ()
    preserved_tokens: tuple[str, ...] = ()
    additional_stops: tuple[str, ...] = ()
