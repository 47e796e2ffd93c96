"""Muse Glimmer replies (llama.cpp's "Muse Glimmer" handler): recipient-addressed messages.

A reply is a run of messages ``<|start|>assistant to=RECIPIENT<|message|>TEXT END``: ``to=self``
messages (ended by ``<|eom|>``) are reasoning, the answer (``to=user`` or no recipient) is
content up to ``<|eot|>`` or ``<|eom|>``, and a message to any other recipient carries one call
as ATEM XML (``<atem:function_calls><atem:invoke name="NAME"><atem:parameter name="P">V
</atem:parameter>...``), typed per the tool's schema. More calls, or calls after the answer,
follow ``<|eom|>``; the generation prompt is always ``<|start|>assistant``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .. import mapper as t
from .. import peg
from ..arguments import arg_name, tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_or_json,
    patterns,
)
from ..description import (
    CallMessage,
    Content,
    Expect,
    Flow,
    FlowState,
    Messages,
    ReplyFormat,
    TextMessage,
)
from ..prefill import Continuation
from ..request import ReplyRequest
from ..schema import ALL_TYPES, parameters, value_types
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for"]

NAME = "Muse Glimmer"
REQUIRED = ("<atem:function_calls>", "<|eom|>")
GENERATION_PROMPT = "<|start|>assistant"
EOM = "<|eom|>"
EOT = "<|eot|>"
CALLS_CLOSE = "</atem:function_calls>"
PARAM_CLOSE = "</atem:parameter>"
# the prefill: the message to self (the thought), then (continuing the content) to the user
CONTINUATION = Continuation(
    GENERATION_PROMPT,
    think_start=" to=self<|message|>",
    think_end=EOM + GENERATION_PROMPT + " to=user<|message|>",
)


def _may_be_string(schema: Any, root: Mapping[str, Any]) -> bool:
    # a schema that says nothing about its type is not taken for a string
    types = value_types(schema, root)
    return "string" in types and types != ALL_TYPES


def _call(fn: Mapping[str, Any]) -> peg.Parser:
    name = str(fn["name"])
    close = peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(PARAM_CLOSE))
    args: list[peg.Parser] = []
    for pname, schema, _required, root in parameters(fn):
        if _may_be_string(schema, root):
            value = peg.Seq(peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(PARAM_CLOSE)), close)
        else:
            value = peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), close)
        opener = peg.atomic_tag(
            t.TOOL_ARG_OPEN,
            peg.Seq(peg.Literal('<atem:parameter name="'), arg_name(pname), peg.Literal('">')),
        )
        args.append(peg.Tag(t.TOOL_ARG, peg.Seq(opener, value)))
    body: peg.Parser = peg.Eps()
    if args:
        body = peg.Repeat(peg.Seq(peg.Choice(*args), peg.Space()), 0, -1)
    ws = peg.Space()
    opener = peg.atomic_tag(
        t.TOOL_OPEN,
        peg.Seq(
            peg.Literal(" to="),
            # the recipient: llama.cpp keeps none of it; the called tool's name is markup
            peg.Tag(t.markup_tag(re.escape(name)), peg.Until("<|message|>")),
            peg.Literal("<|message|><atem:function_calls>"),
            ws,
            peg.Literal('<atem:invoke name="'),
            tool_name(name),
            peg.Literal('">'),
            ws,
        ),
    )
    closer = peg.atomic_tag(
        t.TOOL_CLOSE, peg.Seq(peg.Literal("</atem:invoke>"), ws, peg.Literal(CALLS_CLOSE))
    )
    return peg.Tag(t.TOOL, peg.Seq(opener, ws, peg.Tag(t.TOOL_ARGS, body), ws, closer))


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    functions = tool_functions(request.tools)
    calls = bool(functions) and request.tool_choice != "none"
    extract = request.reasoning_format != "none"
    if not extract and not calls:
        # everything after the generation prompt is content, verbatim
        return ReplyFormat(
            NAME, (Expect(GENERATION_PROMPT), Content(None)), continuation=CONTINUATION
        )
    start = peg.Literal(GENERATION_PROMPT)
    analysis = TextMessage(
        peg.Literal(" to=self<|message|>"),
        "reasoning" if extract else "content",
        (EOM,),
        peg.Literal(EOM),
        lead=start,
        then="messages",
    )
    answer_header = peg.Seq(peg.optional(peg.Literal(" to=user")), peg.Literal("<|message|>"))
    states: dict[str, FlowState] = {"messages": FlowState((analysis,), otherwise="last", loop=True)}
    if not calls:
        states["last"] = FlowState((TextMessage(answer_header, "content", (EOT, EOM), lead=start),))
    else:
        choice = peg.Choice(*(_call(fn) for fn in functions))
        more = "calls" if request.parallel_tool_calls else ""
        first = CallMessage(peg.Seq(start, choice), CALLS_CLOSE, then=more)
        following = CallMessage(peg.Seq(peg.Literal(EOM), start, choice), CALLS_CLOSE, then=more)
        answer = TextMessage(answer_header, "content", (EOT, EOM), lead=start, then="after")
        if request.tool_choice == "required":
            states["last"] = FlowState((first,))
        else:
            states["last"] = FlowState((first, answer))
        # calls may follow the answer after <|eom|>
        states["after"] = FlowState((following,), otherwise="")
        states["calls"] = FlowState((following,), otherwise="")
    flow = Flow(
        states=states,
        start="messages",
        openers=(EOM + GENERATION_PROMPT + " to=", GENERATION_PROMPT + " to=", " to="),
        name_marker='<atem:invoke name="',
        name_marker_end='"',
        tool_names=tool_names(functions),
    )
    return ReplyFormat(NAME, (Messages(flow),), stop=(EOT,), continuation=CONTINUATION)


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (
    "<|start|>",
    "<|message|>",
    EOM,
    EOT,
    "<atem:function_calls>",
    "<atem:invoke",
    "<atem:parameter",
    PARAM_CLOSE,
    "</atem:invoke>",
    CALLS_CLOSE,
)
TRIGGERS = patterns(
    r"(?:^|<\|start\|>assistant)( to=(?!self<\|message\|>)(?!user<\|message\|>)[^<]*?<\|message\|>)"
)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return calls_or_json(request, PRESERVED_TOKENS, TRIGGERS)


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))
