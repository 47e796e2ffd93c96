"""MiniCPM5: ``<function name="f"><param name="p">value</param></function>`` calls.

llama.cpp's handler "MiniCPM5": with reasoning extraction the reply must open a thought (the
generation prompt does), then content up to ``<function``, then one call (any number with
``parallel_tool_calls``), each followed by whitespace, and nothing after them (the parse
fails). String parameters are raw text, or CDATA; other parameters are JSON. With a response format
the thought is followed by one JSON value (tools aside); what follows the value is dropped.
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
    calls_or_json,
    has_response_format,
    words,
)
from ..description import (
    Calls,
    CallSection,
    Content,
    ContentValue,
    End,
    Expect,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    Whitespace,
    steps,
)
from ..grammar import (
    before_calls,
    calls_only,
    reads_thought,
    tagged_arguments,
    tool_parameters,
)
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import json_content
from ..schema import may_be_string, parameters
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "MiniCPM5"
REQUIRED = ("Tool usage guidelines:", '<function name="', '<param name="')
PREFIX = "<|im_start|>assistant\n"
PARAM_END = "</param>"
CONTINUATION = Continuation(PREFIX, think_start="<think>\n", think_end="\n</think>\n\n")
THOUGHT = ReasoningBlock(
    start="<think>", stops=("</think>",), closers=(("</think>", True),), required=True
)


def _string_value() -> peg.Parser:
    close = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(PARAM_END))
    cdata = peg.Seq(
        peg.Literal("<![CDATA["),
        peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until("]]>")),
        peg.Literal("]]>"),
        close,
    )
    raw = peg.Seq(
        peg.Not(peg.Literal("<![CDATA[")),
        peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(PARAM_END)),
        close,
    )
    return peg.Choice(cdata, raw)


def _call(function: Mapping[str, Any]) -> peg.Parser:
    name = str(function["name"])
    close = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(PARAM_END))
    args: list[peg.Parser] = []
    for pname, schema, _required, root in parameters(function):
        if may_be_string(schema, root):
            value = _string_value()
        else:
            value = peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), close)
        opener = peg.Seq(peg.Literal('<param name="'), arg_name(pname), peg.Literal('">'))
        args.append(peg.Tag(t.TOOL_ARG, peg.Seq(peg.atomic_tag(t.TOOL_ARG_OPEN, opener), value)))
    body: peg.Parser = peg.Repeat(peg.Seq(peg.Choice(*args), peg.Space())) if args else peg.Eps()
    opener = peg.Seq(peg.Literal('<function name="'), tool_name(name), peg.Literal('">'))
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, opener),
            peg.Space(),
            peg.Tag(t.TOOL_ARGS, body),
            peg.Space(),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal("</function>")),
        ),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    reasoning = THOUGHT if request.reasoning_format != "none" else None
    thought = (Thought(reasoning), Whitespace()) if reasoning is not None else ()
    functions = tool_functions(request.tools)
    if request.json_schema:
        # a response format: one JSON value right after the thought (tools aside); what
        # follows it is dropped
        value = ContentValue(json_content())
        return ReplyFormat(NAME, steps(Expect(PREFIX), *thought, value), continuation=CONTINUATION)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(
            NAME,
            steps(Expect(PREFIX), *thought, Content(None), End()),
            continuation=CONTINUATION,
        )
    call = peg.Choice(*(_call(f) for f in functions))
    section = CallSection(
        first=call,
        next=call if request.parallel_tool_calls else None,
        # at least one call once the content stops at `<function` (tool_choice aside)
        required=True,
        commit="</function>",
        openers=("<function",),
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME,
        steps(Expect(PREFIX), *thought, Content(("<function",)), Calls(section), End()),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = ("<function", "<param", "</function>", PARAM_END, "<think>", "</think>")


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return calls_or_json(request, PRESERVED_TOKENS, words("<function"))


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def _grammar_call(r: g.Rules, fn: Mapping[str, Any], string_value: g.Expr, strict: bool) -> g.Expr:
    """``<function name="NAME">``, any number of arguments in any order, ``</function>``
    (``strict``: each required argument once, as ``required_arguments`` says)."""
    name = str(fn["name"])
    arguments: list[tuple[g.Expr, bool]] = []
    for param in tool_parameters(fn):
        if g.may_be_string(param.schema):
            value = string_value
        else:
            schema_name = f"tool-{name}-arg-{param.name}-schema"
            value = g.tag(g.schema(r.json(), schema_name, param.schema)) + g.tag(g.lit(PARAM_END))
        opener = g.tag('<param name="' + g.tag(g.lit(param.name)) + '">')
        arguments.append((g.tag(opener + value), param.required))
    args = tagged_arguments(r, f"tool-{name}-args", arguments, strict)
    opener = g.tag('<function name="' + g.tag(g.lit(name)) + '">')
    return g.tag(opener << g.tag(args) << g.tag(g.lit("</function>")))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought, then the response format's
    JSON, or the content up to ``<function`` and the calls (a string value: raw text up to
    ``</param>``, or CDATA)."""
    r = g.Rules()
    reasoning = g.nothing()
    if reads_thought(request):
        reasoning = ("<think>" << g.tag(g.until("</think>")) << "</think>") + g.space()
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format", request.json_schema))
        return r.gbnf(g.seq(PREFIX, reasoning, value), lazy=False)
    if not calls_offered(request):
        return r.gbnf(g.seq(PREFIX, reasoning, g.tag(g.until()), g.nothing()), lazy=False)
    param_close = g.tag(g.lit(PARAM_END))
    string_value = g.choice(
        "<![CDATA[" + g.up_to("]]>") + param_close,
        g.nothing() + g.up_to(PARAM_END),
    )
    calls = g.choice()
    for fn in tool_functions(request.tools):
        calls = calls | r.rule(
            f"tool-{fn['name']}", _grammar_call(r, fn, string_value, calls_only(request))
        )
    most = -1 if request.parallel_tool_calls else 1
    tool_calls = r.trigger_rule("tool-call", g.repeat(calls + g.space(), 1, most))
    content = before_calls(request, g.tag(g.until("<function")))
    lazy = request.tool_choice != "required"
    return r.gbnf(g.seq(PREFIX, reasoning, content, tool_calls, g.nothing()), lazy=lazy)
