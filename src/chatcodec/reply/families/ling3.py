"""Ling 3.0 / Bailing V3: ``<tool_call>NAME <arg_key>k</arg_key><arg_value>v</arg_value>``.

llama.cpp's handler "Ling 3.0 (Bailing V3)": the think tags are consumed even with reasoning
extraction off (the body is then content); a thought the generation prompt opened also ends at
``<tool_call>``. Content runs to the first ``<tool_call>``; calls (one unless
``parallel_tool_calls``) are followed by content up to ``<|role_end|>``, and a call that does not
parse is content too. Values are typed by the schema (unions with string try JSON first);
required arguments in any order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .. import mapper as t
from .. import peg
from ..arguments import arg_name, tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_offered,
    constraint,
    words,
)
from ..description import (
    Calls,
    CallSection,
    Content,
    End,
    Expect,
    Marker,
    ReasoningBlock,
    ReplyFormat,
    Text,
    Thought,
    Whitespace,
)
from ..prefill import Continuation
from ..request import ReplyRequest
from ..schema import parameters, value_types
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for"]

NAME = "Ling 3.0 (Bailing V3)"
REQUIRED = ("<role>ASSISTANT</role>", "<arg_key>")
ROLE = "<role>ASSISTANT</role>"
THINK_START = "<think>"
THINK_END = "</think>"
CALL_START = "<tool_call>"
CALL_END = "</tool_call>"
ROLE_END = "<|role_end|>"
VALUE_END = "</arg_value>"
CONTINUATION = Continuation(ROLE + "\n", think_start=THINK_START, think_end=THINK_END)


def _value(types: frozenset[str]) -> peg.Parser:
    close = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(VALUE_END))
    raw = peg.Seq(peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(VALUE_END)), close)
    typed = peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), close)
    if "string" not in types:
        return typed
    if types == {"string"}:
        return raw
    return peg.Choice(peg.Atomic(typed), raw)


def _call(function: Mapping[str, Any]) -> peg.Parser:
    name = str(function["name"])
    required: list[peg.Parser] = []
    optionals: list[peg.Parser] = []
    for pname, schema, is_required, root in parameters(function):
        opener = peg.Seq(peg.Literal("<arg_key>"), arg_name(pname), peg.Literal("</arg_key>"))
        arg = peg.Seq(
            peg.optional(peg.Space()),
            peg.Tag(
                t.TOOL_ARG,
                peg.Seq(
                    peg.atomic_tag(t.TOOL_ARG_OPEN, opener),
                    peg.optional(peg.Space()),
                    peg.Literal("<arg_value>"),
                    _value(value_types(schema, root)),
                ),
            ),
        )
        (required if is_required else optionals).append(arg)
    args = peg.permute(required)
    if optionals:
        args = peg.Seq(args, peg.Repeat(peg.Choice(*optionals)))
    opener = peg.Seq(peg.Literal(CALL_START), tool_name(name), peg.optional(peg.Space()))
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, opener),
            peg.Tag(t.TOOL_ARGS, args),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Seq(peg.optional(peg.Space()), peg.Literal(CALL_END))),
        ),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    # the prompt left a thought open: it also ends where a call begins; a continued message
    # leaves it open unless its content is continued
    last_open = request.generation_prompt.rfind(THINK_START)
    think_open = last_open >= 0 and last_open > request.generation_prompt.rfind(THINK_END)
    if request.continue_final_message != "none":
        think_open = request.continue_final_message != "content"
    thought = ReasoningBlock(
        start=THINK_START,
        stops=(THINK_END, CALL_START) if think_open else (THINK_END,),
        closers=((THINK_END, True), (CALL_START, False)),
        space_after_start=False,
        start_may_be_absent=True,
        body="reasoning" if request.reasoning_format != "none" else "content",
    )
    opening = (Expect(ROLE), Whitespace(), Thought(thought))
    functions = tool_functions(request.tools)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(
            NAME,
            (*opening, Content((ROLE_END,)), Marker(ROLE_END), End()),
            stop=(ROLE_END,),
            continuation=CONTINUATION,
        )
    call = peg.Choice(*(_call(f) for f in functions))
    section = CallSection(
        first=call,
        next=call if request.parallel_tool_calls else None,
        required=request.tool_choice == "required",
        commit=CALL_END,
        openers=(CALL_START,),
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME,
        (
            *opening,
            Content((CALL_START,)),
            Calls(section, then=(Text((ROLE_END,)), Marker(ROLE_END))),
            Text((ROLE_END,)),
            Marker(ROLE_END),
            End(),
        ),
        stop=(ROLE_END,),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (
    THINK_START,
    THINK_END,
    CALL_START,
    CALL_END,
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    VALUE_END,
    ROLE_END,
)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    # a response format gets no grammar here
    return constraint(
        PRESERVED_TOKENS,
        grammar=calls_offered(request),
        lazy=not request.tool_choice == "required",
        triggers=words(CALL_START),
        additional_stops=(ROLE_END,),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))
