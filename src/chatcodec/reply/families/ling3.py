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

from ...grammar import rules as g
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
from ..grammar import before_calls, calls_only, tool_parameters
from ..prefill import Continuation
from ..request import ReplyRequest
from ..schema import parameters, value_types
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

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


def _think_open(request: ReplyRequest) -> bool:
    """The prompt left a thought open (it then also ends where a call begins); a continued
    message leaves it open unless its content is continued."""
    if request.continue_final_message != "none":
        return request.continue_final_message != "content"
    last_open = request.generation_prompt.rfind(THINK_START)
    return last_open >= 0 and last_open > request.generation_prompt.rfind(THINK_END)


def _reply(request: ReplyRequest) -> ReplyFormat:
    think_open = _think_open(request)
    thought = ReasoningBlock(
        start=THINK_START,
        stops=(THINK_END, CALL_START) if think_open else (THINK_END,),
        closers=((THINK_END, True), (CALL_START, False)),
        space_after_start=False,
        start_may_be_absent=True,
        peek_cut_ends=True,
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


# ------------------------------------------------------------------ llama.cpp's grammar


def _grammar_call(r: g.Rules, fn: Mapping[str, Any], arg_string: g.Expr) -> g.Expr:
    """One call: ``<tool_call>NAME``, the required arguments in any order, then the optional
    ones in any order and number, ``</tool_call>``."""
    name = str(fn["name"])
    arg_close = g.tag(g.lit(VALUE_END))
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for param in tool_parameters(fn):
        rule_name = f"ling3-arg-{name}-{param.name}"
        typed = g.tag(g.schema(r.json(), f"{rule_name}-schema", param.schema)) + arg_close
        if "string" not in param.types:
            value = typed
        elif param.types == {"string"}:
            value = arg_string
        else:
            # the grammar keeps only the raw string (it accepts any text anyway)
            value = g.raw(g.tag(typed) | arg_string, "ling3-arg-string")
        opener = g.tag("<arg_key>" + g.tag(g.lit(param.name)) + "</arg_key>")
        arg = g.optional(g.space()) + g.tag(opener + g.optional(g.space()) + "<arg_value>" + value)
        (required if param.required else optional).append(r.rule(rule_name, arg))
    args = r.permute(f"ling3-{name}-args", required)
    if optional:
        args = args + g.zero_or_more(g.choice(*optional))
    return g.tag(
        g.tag(CALL_START + g.tag(g.lit(name)) + g.optional(g.space()))
        + g.tag(args)
        + g.tag(g.optional(g.space()) + CALL_END)
    )


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the calls (a response format gets none),
    each argument's value as its schema says (a string: any text up to ``</arg_value>``),
    then content up to ``<|role_end|>``."""
    r = g.Rules()
    arg_string = r.rule("ling3-arg-string", g.tag(g.until(VALUE_END)) + g.tag(g.lit(VALUE_END)))
    tools = g.choice()
    for fn in tool_functions(request.tools):
        tools = tools | r.rule(f"ling3-tool-{fn['name']}", _grammar_call(r, fn, arg_string))
    calls = tools + g.zero_or_more(g.space() + tools) if request.parallel_tool_calls else tools

    def text_after() -> g.Expr:
        """The content llama.cpp lets follow the calls (none under the guaranteed policy's
        required calls)."""
        return g.nothing() if calls_only(request) else g.optional(g.tag(g.until(ROLE_END)))

    tail = text_after() + g.optional(ROLE_END)
    section = r.trigger_rule("ling3-tool-call", calls + g.space() + tail)
    required = request.tool_choice == "required"
    body_end = (THINK_END, CALL_START) if _think_open(request) else (THINK_END,)
    reasoning = g.optional(
        g.optional(THINK_START) + g.tag(g.until(*body_end)) + g.optional(THINK_END)
    )
    reply = g.seq(
        g.optional(ROLE + g.optional(g.space())),
        reasoning,
        before_calls(request, g.optional(g.tag(g.until(CALL_START)))),
        section if required else g.optional(section),
        text_after() + g.optional(ROLE_END),
    )
    return r.gbnf(reply, lazy=not required)
