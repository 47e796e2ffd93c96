"""A request's grammar as the sampler takes it: GBNF text plus llama.cpp's sampler setup."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Trigger", "Grammar", "constrained_field"]

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
    them whole). ``additional_stops``: extra stop strings. ``generation_prompt``: the text a
    whole grammar's root starts with (what llama.cpp feeds the sampler before the reply).

    The exports give the same language to engines that constrain the output from its first
    character (docs/grammar.md): ``to_lark`` (llguidance), ``to_structural_tag`` (xgrammar),
    and the request fields of llama.cpp's server, vLLM and SGLang. A grammar woken by a regex
    trigger cannot be exported (``GrammarError``).
    """

    gbnf: str
    lazy: bool = False
    triggers: tuple[Trigger, ...] = ()
    preserved_tokens: tuple[str, ...] = ()
    additional_stops: tuple[str, ...] = ()
    generation_prompt: str = ""

    def output_gbnf(self) -> str:
        """A whole grammar's GBNF from the model's first character on (without the generation
        prompt); ``GrammarError`` for a lazy one."""
        from .export import output_gbnf

        return output_gbnf(self)

    def to_lark(self, special_tokens: Iterable[str] = ()) -> str:
        """The same language in llguidance's Lark, over the whole output: a lazy grammar as any
        text without a trigger, then optionally a trigger and what the grammar takes after it.
        ``special_tokens``: those of ``preserved_tokens`` (or others) the engine's tokenizer
        keeps special, written ``<token>`` (llguidance matches them by name, not as text)."""
        from .export import to_lark

        return to_lark(self, tuple(special_tokens))

    def to_structural_tag(self) -> dict[str, Any]:
        """xgrammar's structural tag (vLLM's and SGLang's ``structural_tag``): ``triggered_tags``
        woken by the trigger words for a lazy grammar, one ``grammar`` format for a whole one."""
        from .export import to_structural_tag

        return to_structural_tag(self)

    def llama_server_fields(self) -> dict[str, Any]:
        """The fields of a llama.cpp server ``/completion`` request: ``grammar``,
        ``grammar_lazy``, ``grammar_triggers``, ``preserved_tokens`` (and ``stop``)."""
        from .export import llama_server_fields

        return llama_server_fields(self)

    def llama_cpp_python_fields(self) -> dict[str, Any]:
        """llama-cpp-python's server: ``grammar`` (the whole output's GBNF) (and ``stop``);
        ``GrammarError`` for a lazy grammar, which it cannot run."""
        from .export import llama_cpp_python_fields

        return llama_cpp_python_fields(self)

    def vllm_fields(self) -> dict[str, Any]:
        """vLLM's ``structured_outputs`` (``grammar`` or ``structural_tag``) (and ``stop``)."""
        from .export import vllm_fields

        return vllm_fields(self)

    def sglang_fields(self) -> dict[str, Any]:
        """SGLang's sampling parameters: ``ebnf`` or ``structural_tag`` (and ``stop``)."""
        from .export import sglang_fields

        return sglang_fields(self)


def constrained_field(
    tools: object,
    tool_choice: object,
    parallel_tool_calls: bool | None,
    response_format_type: str | None,
) -> str | None:
    """The request field whose meaning only a grammar enforces, if any: ``response_format``
    (a type other than ``text``), ``tool_choice`` (``required`` or a named function) or
    ``parallel_tool_calls`` (false, with tools a call may be made to). What a server that
    hands the turn's grammar to its engine only when it must checks."""
    if response_format_type is not None and response_format_type != "text":
        return "response_format"
    if tools and tool_choice not in (None, "auto", "none"):
        return "tool_choice"
    if tools and parallel_tool_calls is False and tool_choice != "none":
        return "parallel_tool_calls"
    return None
