"""Qwen3-Coder XML calls: Qwen3-Coder, Qwen3.5, Nemotron-3 Nano, StepFun-3.5 (llama.cpp's handler)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import peg
from ..arguments import XmlCallSyntax, tool_functions, tool_names, xml_call_parsers
from ..description import CallSection, ReasoningBlock, ReplyFormat, legacy_format
from ..prefill import Continuation

__all__ = ["HANDLER", "matches", "describe"]

HANDLER = "Qwen3-Coder"
PREFIX = "<|im_start|>assistant\n"
# the prefill: the thought (templates with one), then the content
CONTINUATION = Continuation(PREFIX, think_start="<think>\n", think_end="\n</think>\n\n")
CONTINUATION_NO_THOUGHT = Continuation(PREFIX)
SYNTAX = XmlCallSyntax(
    scope_open="<tool_call>\n",
    function_open="<function=",
    function_name_end=">\n",
    function_close="</function>\n",
    scope_close="</tool_call>",
    param_open="<parameter=",
    param_name_end=">\n",
    param_close="\n</parameter>\n",
)
THOUGHT = ReasoningBlock(
    start="<think>",
    stops=("</think>", "<tool_call>"),
    # llama.cpp ends a thought at </think> (consumed) or at <tool_call> (left for the call)
    closers=(("</think>", True), ("<tool_call>", False)),
)


def matches(source: str) -> bool:
    """llama.cpp's dispatch rule for this handler (checked after the other specialized ones)."""
    return (
        "<tool_call>" in source
        and "<function=" in source
        and "<parameter=" in source
        and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source
    )


def describe(
    source: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str,
    parallel_tool_calls: bool,
    reasoning_format: str,
) -> ReplyFormat:
    thinking = "<think>" in source
    # Qwen3-Coder (no <think> in its template) may open a call with a bare <function=NAME>
    bare_function = not thinking
    reasoning = THOUGHT if thinking and reasoning_format != "none" else None
    functions = tool_functions(tools)
    if not functions or tool_choice == "none":
        return legacy_format(
            HANDLER,
            PREFIX,
            reasoning,
            None,
            stop=("<|im_end|>",),
            continuation=CONTINUATION if thinking else CONTINUATION_NO_THOUGHT,
        )
    body = peg.Seq(xml_call_parsers(SYNTAX, functions), peg.Literal(SYNTAX.scope_close))
    call = peg.Seq(peg.Literal(SYNTAX.scope_open), body)
    first = (
        peg.Seq(peg.Repeat(peg.Literal(SYNTAX.scope_open), 0, 1), body) if bare_function else call
    )
    starts = ["<tool_call>"]
    if bare_function:
        starts += [f"{SYNTAX.function_open}{fn['name']}>" for fn in functions]
    section = CallSection(
        first=first,
        next=call if parallel_tool_calls else None,
        required=tool_choice == "required",
        commit=SYNTAX.scope_close,
        openers=("<tool_call>", SYNTAX.function_open),
        name_marker=SYNTAX.function_open,
        name_marker_end=">",
        tool_names=tool_names(functions),
    )
    return legacy_format(
        HANDLER,
        PREFIX,
        reasoning,
        tuple(starts),
        section,
        stop=("<|im_end|>",),
        continuation=CONTINUATION if thinking else CONTINUATION_NO_THOUGHT,
    )
