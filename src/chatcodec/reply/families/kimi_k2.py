"""Kimi K2 (Instruct / Thinking): ``functions.NAME:N`` calls with raw JSON arguments.

llama.cpp's handler "Kimi K2 Thinking": a leading ``<think>`` (which calls may interrupt),
content up to the call section, then ``<|tool_call_begin|>functions.NAME:N
<|tool_call_argument_begin|>{json}<|tool_call_end|>`` calls whose section and end markers are
optional, and nothing after them (the parse fails). The call id is ``functions.NAME:N``.
"""

from __future__ import annotations

from dataclasses import replace

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
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
    Thought,
    steps,
)
from ..grammar import before_calls, parameters_node, reads_thought
from ..prefill import Continuation
from ..request import ReplyRequest
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "Kimi K2 Thinking"
REQUIRED = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")
PREFIX = "<|im_assistant|>assistant<|im_middle|>"
SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
CONTINUATION = Continuation(PREFIX, think_start="<think>", think_end="</think>")
THOUGHT = ReasoningBlock(
    start="<think>",
    stops=("</think>", SECTION_BEGIN, CALL_BEGIN),
    # an unclosed thought ends where the calls begin
    closers=(("</think>", True), (SECTION_BEGIN, False), (CALL_BEGIN, False)),
    space_after_start=False,
)


def _call(name: str) -> peg.Parser:
    call_id = peg.atomic_tag(
        t.TOOL_ID,
        peg.Seq(
            peg.Literal("functions."), tool_name(name), peg.Literal(":"), peg.Chars("0123456789")
        ),
    )
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, peg.Seq(call_id, peg.Literal(ARGS_BEGIN))),
            peg.Tag(t.TOOL_ARGS, peg.json_value),
            peg.atomic_tag(t.TOOL_CLOSE, peg.optional(peg.Literal(CALL_END))),
        ),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    reasoning = THOUGHT if request.reasoning_format != "none" else None
    functions = tool_functions(request.tools)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(
            NAME,
            steps(Expect(PREFIX), Thought(reasoning) if reasoning else None, Content(None), End()),
            continuation=CONTINUATION,
        )
    call = peg.Seq(peg.Literal(CALL_BEGIN), peg.Choice(*(_call(str(f["name"])) for f in functions)))
    section = CallSection(
        first=call,
        next=call if request.parallel_tool_calls else None,
        required=request.tool_choice == "required",
        commit=CALL_END,
        openers=(CALL_BEGIN,),
        tool_names=tool_names(functions),
        space_after=False,
        # the call's end marker is optional: a call that parses to the end of the text so far
        # may still take it
        settle=True,
    )
    return ReplyFormat(
        NAME,
        steps(
            Expect(PREFIX),
            Thought(reasoning) if reasoning else None,
            Content((SECTION_BEGIN, CALL_BEGIN)),
            Marker(SECTION_BEGIN),
            Calls(section),
            Marker(SECTION_END),
            End(),
        ),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (
    SECTION_BEGIN,
    SECTION_END,
    CALL_BEGIN,
    ARGS_BEGIN,
    CALL_END,
    "<think>",
    "</think>",
)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return constraint(
        PRESERVED_TOKENS,
        grammar=calls_offered(request),
        lazy=request.tool_choice == "auto",
        triggers=words(CALL_BEGIN),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought, content up to the calls, then
    the calls (each ``functions.NAME:N`` and its arguments as the tool's schema says), their
    section and end markers optional. Lazy: its root is the calls from the first
    ``<|tool_call_begin|>``."""
    r = g.Rules()
    reasoning = g.nothing()
    if reads_thought(request):
        thought = g.tag(g.until("</think>", SECTION_BEGIN, CALL_BEGIN))
        reasoning = g.optional("<think>" + thought + g.optional(g.lit("</think>")))
    lazy = request.tool_choice == "auto"
    if not calls_offered(request):
        return r.gbnf(g.seq(PREFIX, reasoning, g.tag(g.until())), lazy=lazy)
    tools = g.choice()
    for function in tool_functions(request.tools):
        name = str(function["name"])
        call_id = g.tag("functions." + g.tag(g.lit(name)) + ":" + g.chars("[0-9]", 1, -1))
        args = g.schema(r.json(), f"tool-{name}-schema", parameters_node(function))
        call = g.tag(g.tag(call_id + ARGS_BEGIN) + g.tag(args) + g.tag(g.optional(g.lit(CALL_END))))
        tools = tools | r.rule(f"tool-{name}", call)
    least = 1 if request.tool_choice == "required" else 0
    most = -1 if request.parallel_tool_calls else 1
    calls = g.repeat(CALL_BEGIN + tools, least, most) + g.optional(g.lit(SECTION_END))
    section = r.rule(
        "tool-calls", g.optional(g.lit(SECTION_BEGIN)) + r.trigger_rule("tool-call", calls)
    )
    content = before_calls(request, g.tag(g.until(SECTION_BEGIN, CALL_BEGIN)))
    return r.gbnf(g.seq(PREFIX, reasoning, content, section), lazy=lazy)
