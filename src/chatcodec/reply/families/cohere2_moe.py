"""Cohere2 MoE (North Code): a thought, then EITHER a text block OR a JSON action list.

llama.cpp's "Cohere2 MoE" handler. The reply is read from
``<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>`` (the generation prompt goes on with
``<|START_THINKING|>``, so a reply starts inside the thought). The thought runs to
``<|END_THINKING|>`` (consumed) or to ``<|START_TEXT|>`` / ``<|START_ACTION|>``; with
``reasoning_format`` none the whole block, markers included, is content. Then either
``<|START_TEXT|>`` content ``[<|END_TEXT|>]`` or
``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}, ...]``
``<|END_ACTION|>``
(tried first; with ``tool_choice`` required the only choice), an optional
``<|END_OF_TURN_TOKEN|>`` and the end of the reply. ``tool_call_id`` (a string or a number)
becomes the call's id and cannot be left out; the parameters are the model's JSON text.
Anything else — plain text, trailing text, an unknown tool, a second call when
``parallel_tool_calls`` is false — makes the parse fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name
from ..constraint import (
    Constraint,
    calls_offered,
    constraint,
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
    Marker,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    steps,
)
from ..grammar import JsonLayout, standard_json_tools
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import json_content
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "Cohere2 MoE"
REQUIRED = ("<|START_TEXT|>", "<|START_ACTION|>")
PREFIX = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
THINK_START = "<|START_THINKING|>"
THINK_END = "<|END_THINKING|>"
TEXT_START = "<|START_TEXT|>"
TEXT_END = "<|END_TEXT|>"
ACTION_START = "<|START_ACTION|>"
ACTION_END = "<|END_ACTION|>"
TURN_END = "<|END_OF_TURN_TOKEN|>"
# the prefill: the thought always opens, the content is a text block
CONTINUATION = Continuation(PREFIX, think_start=THINK_START, think_end=THINK_END + TEXT_START)


def _thought(inline: bool) -> ReasoningBlock:
    return ReasoningBlock(
        start=THINK_START,
        stops=(THINK_END, TEXT_START, ACTION_START),
        # the end marker is optional: the text or the action may follow the thought directly
        closers=((THINK_END, True), (TEXT_START, False), (ACTION_START, False)),
        space_after_start=False,
        body="inline" if inline else "reasoning",
    )


def _member(key: str, value: peg.Parser) -> peg.Parser:
    return peg.Seq(peg.Literal(f'"{key}"'), peg.Space(), peg.Literal(":"), peg.Space(), value)


def _call(fn: Mapping[str, Any]) -> peg.Parser:
    """``{"tool_call_id": ID, "tool_name": "NAME", "parameters": JSON}`` in this order."""
    ws = peg.Space()
    call_id = peg.Atomic(
        _member(
            "tool_call_id",
            peg.Choice(
                peg.Seq(
                    peg.Literal('"'),
                    peg.atomic_tag(t.TOOL_ID, peg.StringBody('"')),
                    peg.Literal('"'),
                ),
                peg.atomic_tag(t.TOOL_ID, peg.json_number),
            ),
        )
    )
    name = _member(
        "tool_name",
        peg.Atomic(peg.Seq(peg.Literal('"'), tool_name(str(fn["name"])), peg.Literal('"'))),
    )
    arguments = _member("parameters", peg.Tag(t.TOOL_ARGS, peg.json_value))
    comma = peg.Seq(ws, peg.Literal(","), ws)
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, peg.Literal("{")),
            ws,
            peg.optional(call_id),
            comma,
            name,
            comma,
            arguments,
            ws,
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal("}")),
        ),
    )


def _actions(functions: Sequence[Mapping[str, Any]], parallel: bool) -> peg.Parser:
    ws = peg.Space()
    call = peg.Choice(*(_call(fn) for fn in functions))
    calls: peg.Parser = call
    if parallel:
        calls = peg.Seq(call, peg.Repeat(peg.Seq(ws, peg.Literal(","), ws, call)))
    return peg.Seq(
        peg.Literal(ACTION_START),
        ws,
        peg.Literal("["),
        ws,
        calls,
        ws,
        peg.Literal("]"),
        ws,
        peg.Literal(ACTION_END),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    reasoning = _thought(inline=request.reasoning_format == "none")
    value = None
    if request.json_schema:
        # a response format makes the text block one JSON value
        value = peg.Seq(
            peg.Literal(TEXT_START),
            json_content(),
            peg.optional(peg.Literal(TEXT_END)),
        )
    functions = tool_functions(request.tools)
    section = None
    if functions and request.tool_choice != "none":
        section = CallSection(
            first=_actions(functions, request.parallel_tool_calls),
            next=None,
            required=request.tool_choice == "required",
            commit=ACTION_END,
            openers=(ACTION_START,),
            space_after=False,
        )
    content = (
        ContentValue(value) if value is not None else Content((TEXT_END,), TEXT_START, TEXT_END)
    )
    return ReplyFormat(
        NAME,
        steps(
            Expect(PREFIX),
            Thought(reasoning),
            Calls(section, otherwise=(content,)) if section is not None else content,
            Marker(TURN_END),
            End(),
        ),
        stop=(TURN_END,),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (
    "<|START_OF_TURN_TOKEN|>",
    TURN_END,
    "<|CHATBOT_TOKEN|>",
    "<|USER_TOKEN|>",
    "<|SYSTEM_TOKEN|>",
    THINK_START,
    THINK_END,
    TEXT_START,
    TEXT_END,
    ACTION_START,
    ACTION_END,
    "<|START_TOOL_RESULT|>",
    "<|END_TOOL_RESULT|>",
)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return constraint(
        PRESERVED_TOKENS,
        grammar=has_response_format(request) or calls_offered(request),
        lazy=not has_response_format(request) and request.tool_choice == "auto",
        triggers=words(ACTION_START),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar

ACTION_LAYOUT = JsonLayout(
    name_key="tool_name",
    args_key="parameters",
    array_wrapped=True,
    gen_call_id_key="tool_call_id",
    parameters_order=("tool_call_id", "tool_name", "parameters"),
)


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought, then the action list (its
    calls as the JSON objects above) or the text block (a response format's JSON value)."""
    r = g.Rules()
    stops = (THINK_END, TEXT_START, ACTION_START)
    thought = THINK_START + g.until(*stops) + g.optional(THINK_END)
    if request.reasoning_format != "none":
        reasoning = g.optional(THINK_START + g.tag(g.until(*stops)) + g.optional(THINK_END))
    else:
        reasoning = g.optional(g.tag(thought))
    if request.json_schema:
        value = g.schema(r.json(), "response-format-schema", request.json_schema)
        text = TEXT_START + g.tag(value) + g.optional(TEXT_END)
    else:
        text = TEXT_START + g.tag(g.until(TEXT_END)) + g.optional(TEXT_END)
    lazy = not request.json_schema and request.tool_choice == "auto"
    body = text
    if request.tools and request.tool_choice != "none":
        section = (ACTION_START, ACTION_END)
        calls = standard_json_tools(
            r, section, request.tools, request.parallel_tool_calls, True, ACTION_LAYOUT
        )
        body = calls if request.tool_choice == "required" else g.choice(calls, text)
    root = PREFIX + reasoning + body + g.optional(TURN_END) + g.nothing()
    return r.gbnf(root, lazy=lazy)
