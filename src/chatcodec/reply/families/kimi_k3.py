"""Kimi K3: ``<|open|>tag<|sep|> ... <|close|>tag<|sep|>`` sections (llama.cpp's "Kimi K3").

The generation prompt opens the message and its ``think`` section; the think section is
consumed even with reasoning extraction off (its body is then content). The response runs to
its closer or to the tools section; calls are ``<|open|>call tool="NAME" ...<|sep|>`` with one
``<|open|>argument key="K" ...<|sep|>VALUE<|close|>argument<|sep|>`` per argument, typed by the
schema's top-level ``type`` (missing: string; other values are inserted raw); text before a
header's ``<|sep|>`` other than the attributes the template writes is reported as skipped.
Any number of calls (``parallel_tool_calls`` is ignored); nothing may follow the message
(the parse fails).
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
    Step,
    Thought,
    steps,
)
from ..grammar import before_calls, calls_only, required_arguments, tool_parameters
from ..prefill import Continuation
from ..request import ReplyRequest
from ..schema import parameters
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "Kimi K3"
REQUIRED = ("<|open|>", "<|close|>", "<|end_of_msg|>")
SEP = "<|sep|>"
MSG_START = '<|open|>message role="assistant"<|sep|>'
THINK_START = "<|open|>think<|sep|>"
THINK_END = "<|close|>think<|sep|>"
RESP_START = "<|open|>response<|sep|>"
RESP_END = "<|close|>response<|sep|>"
TOOLS_START = "<|open|>tools<|sep|>"
TOOLS_END = "<|close|>tools<|sep|>"
CALL_START = '<|open|>call tool="'
CALL_END = "<|close|>call<|sep|>"
ARG_START = '<|open|>argument key="'
ARG_END = "<|close|>argument<|sep|>"
MSG_END = "<|close|>message<|sep|>"
EOM = "<|end_of_msg|>"
CONTINUATION = Continuation(MSG_START, think_start=THINK_START, think_end=THINK_END + RESP_START)


# the attributes the template writes after a call's tool and an argument's key (markup; any
# other text there is reported as skipped)
CALL_ATTRIBUTES = t.markup_tag(r' index="\d+"')
ARGUMENT_ATTRIBUTES = t.markup_tag(r' type="(?:boolean|null|number|string|object|array)"')


def _call(function: Mapping[str, Any]) -> peg.Parser:
    name = str(function["name"])
    args: peg.Parser = peg.Eps()
    choices: list[peg.Parser] = []
    for key, schema, _required, _root in parameters(function):
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        kind = kind if isinstance(kind, str) else "string"
        value_tag = t.TOOL_ARG_STRING_VALUE if kind == "string" else t.TOOL_ARG_VALUE
        choices.append(
            peg.Tag(
                t.TOOL_ARG,
                peg.Seq(
                    peg.atomic_tag(t.TOOL_ARG_OPEN, peg.Literal(ARG_START)),
                    arg_name(key),
                    peg.Literal('"'),
                    # the type="..." attribute, read and ignored: the schema decides
                    peg.Tag(ARGUMENT_ATTRIBUTES, peg.Until(SEP)),
                    peg.Literal(SEP),
                    peg.Tag(value_tag, peg.Until(ARG_END)),
                    peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(ARG_END)),
                ),
            )
        )
    if choices:
        args = peg.Repeat(peg.Choice(*choices))
    opener = peg.Seq(
        peg.Literal(CALL_START),
        tool_name(name),
        peg.Literal('"'),
        peg.Tag(CALL_ATTRIBUTES, peg.Until(SEP)),  # index="1", read and ignored
        peg.Literal(SEP),
    )
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, opener),
            peg.Tag(t.TOOL_ARGS, args),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(CALL_END)),
        ),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    thought = ReasoningBlock(
        start=THINK_START,
        stops=(THINK_END, RESP_START),
        closers=((THINK_END, True), (RESP_START, False)),
        space_after_start=False,
        start_may_be_absent=True,
        body="reasoning" if request.reasoning_format != "none" else "content",
    )

    def frame(calls: Calls | None) -> tuple[Step, ...]:
        return steps(
            Expect(MSG_START),
            Thought(thought),
            Marker(RESP_START),
            Content((RESP_END, TOOLS_START, MSG_END)),
            Marker(RESP_END),
            calls,
            Marker(MSG_END),
            Marker(EOM),
            End(),
        )

    functions = tool_functions(request.tools)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(NAME, frame(None), continuation=CONTINUATION)
    block = peg.Seq(
        peg.Literal(TOOLS_START),
        peg.Repeat(peg.Choice(*(_call(f) for f in functions)), 1, -1),
        peg.Literal(TOOLS_END),
        peg.optional(peg.Literal(MSG_END)),
        peg.optional(peg.Literal(EOM)),
    )
    section = CallSection(
        first=block,
        next=None,
        required=request.tool_choice == "required",
        commit=TOOLS_END,
        openers=(TOOLS_START,),
        tool_names=tool_names(functions),
        space_after=False,
        settle=True,
    )
    return ReplyFormat(NAME, frame(Calls(section)), continuation=CONTINUATION)


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = ("<|open|>", "<|close|>", SEP, EOM)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    # a response format gets no grammar here
    return constraint(
        PRESERVED_TOKENS,
        grammar=calls_offered(request),
        lazy=not request.tool_choice == "required",
        triggers=words(TOOLS_START),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def _call_rule(r: g.Rules, function: Mapping[str, Any], strict: bool) -> g.Expr:
    """One call: its header (attributes up to ``<|sep|>`` any text), then any of its
    arguments, each value any text up to the argument's closer. ``strict`` (the guaranteed
    policy's required calls): each required argument once, and a value the parse inserts raw
    (its schema's type is not ``string``) is a JSON value of its schema."""
    name = str(function["name"])
    arguments: list[tuple[g.Expr, bool]] = []
    nodes = {param.name: param.schema for param in tool_parameters(function)} if strict else {}
    for key, schema, required, _root in parameters(function):
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        if key in nodes and isinstance(kind, str) and kind != "string":
            value = g.tag(g.schema(r.json(), f"kimi-k3-arg-{name}-{key}-schema", nodes[key]))
        else:
            value = g.tag(g.until(ARG_END))
        arg = g.tag(
            g.tag(g.lit(ARG_START))
            + g.tag(g.lit(key))
            + '"'
            + g.until(SEP)
            + SEP
            + value
            + g.tag(g.lit(ARG_END))
        )
        arguments.append((r.rule(f"kimi-k3-arg-{name}-{key}", arg), required))
    if strict:
        args = required_arguments(r, f"kimi-k3-args-{name}", arguments)
    elif arguments:
        args = g.zero_or_more(g.choice(*(arg for arg, _ in arguments)))
    else:
        args = g.nothing()
    opener = g.tag(CALL_START + g.tag(g.lit(name)) + '"' + g.until(SEP) + SEP)
    return r.rule(f"kimi-k3-tool-{name}", g.tag(opener + g.tag(args) + g.tag(g.lit(CALL_END))))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the message's think and response sections,
    then one tools section of calls and the message's close. Lazy unless a call is required:
    its root is the tools section."""
    r = g.Rules()
    think = g.tag(g.until(THINK_END, RESP_START))
    # llama.cpp lets the thought stay open, and a call written inside it is reasoning: under
    # the guaranteed policy's required calls the thought ends before them
    think_end = g.lit(THINK_END) if calls_only(request) else g.optional(g.lit(THINK_END))
    reasoning = g.optional(g.optional(g.lit(THINK_START)) + think + think_end)
    response = before_calls(
        request,
        g.optional(g.lit(RESP_START))
        + g.tag(g.until(RESP_END, TOOLS_START, MSG_END))
        + g.optional(g.lit(RESP_END)),
    )
    trailer = g.optional(g.lit(MSG_END)) + g.optional(g.lit(EOM))
    head = g.optional(g.lit(MSG_START)) + reasoning + response
    lazy = request.tool_choice != "required"
    if not calls_offered(request):
        return r.gbnf(head + trailer, lazy=lazy)
    calls = g.choice()
    for function in tool_functions(request.tools):
        calls = calls | _call_rule(r, function, calls_only(request))
    # under the guaranteed policy, one call unless parallel (llama.cpp: any number)
    one = calls_only(request) and not request.parallel_tool_calls
    section = r.trigger_rule(
        "kimi-k3-tool-call",
        TOOLS_START + (calls if one else g.one_or_more(calls)) + TOOLS_END + trailer,
    )
    tools = section if request.tool_choice == "required" else g.optional(section)
    return r.gbnf(head + tools + trailer, lazy=lazy)
