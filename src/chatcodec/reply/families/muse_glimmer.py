"""Muse Glimmer replies (llama.cpp's "Muse Glimmer" handler): recipient-addressed messages.

A reply is a run of messages ``<|start|>assistant to=RECIPIENT<|message|>TEXT END``: ``to=self``
messages (ended by ``<|eom|>``) are reasoning, the answer (``to=user`` or no recipient) is
content up to ``<|eot|>`` or ``<|eom|>``, and a message to any other recipient carries one call
as ATEM XML (``<atem:function_calls><atem:invoke name="NAME"><atem:parameter name="P">V
</atem:parameter>...``), typed per the tool's schema. More calls, or calls after the answer,
follow ``<|eom|>``; the generation prompt is always ``<|start|>assistant``. With a response
format the answer holds one JSON value, bare or fenced as ```` ```json ... ``` ```` (tools
aside); what follows it is dropped.
"""

from __future__ import annotations

import re
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
from ..grammar import calls_only, tagged_arguments, tool_parameters
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import fenced_json, json_content
from ..schema import ALL_TYPES, parameters, value_types
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

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
    if not extract and not calls and not request.json_schema:
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
    if request.json_schema:
        # a response format (tools aside): the answer holds one JSON value, fenced or bare;
        # what follows it is dropped
        value = peg.Choice(fenced_json(), json_content())
        states["last"] = FlowState((CallMessage(peg.Seq(start, answer_header, value)),))
    elif not calls:
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


# ------------------------------------------------------------------ llama.cpp's grammar text


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): messages to self, then the answer, the
    response format's JSON (fenced or bare) or the calls, each argument typed by its schema
    (one that may be a string: any text up to the parameter's close)."""
    r = g.Rules()
    start = r.rule("start", g.lit(GENERATION_PROMPT))
    if request.reasoning_format == "none" and not (
        has_response_format(request) or calls_offered(request)
    ):
        return r.gbnf(start + g.tag(g.until()), lazy=False)
    # the thought is reasoning or content: the same text either way
    analysis = r.rule("analysis", " to=self<|message|>" + g.tag(g.until(EOM)) + EOM)
    recipient = g.optional(" to=user")
    final = r.rule("final", recipient + "<|message|>" + g.tag(g.until(EOT, EOM)))
    thoughts = g.zero_or_more(start + analysis)
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
        fenced = "```json" + g.space() + value + g.space() + "```"
        response = r.rule("response-format", recipient + "<|message|>" + (fenced | value))
        return r.gbnf(thoughts + start + response, lazy=False)
    if not calls_offered(request):
        return r.gbnf(thoughts + start + final, lazy=False)
    tools = g.choice()
    string_value = g.up_to(PARAM_CLOSE)
    for fn in tool_functions(request.tools):
        tools = tools | r.rule(
            f"tool-{fn['name']}", _call_grammar(r, fn, string_value, calls_only(request))
        )
    if request.parallel_tool_calls:
        calls = r.trigger_rule("tool-call", tools + g.zero_or_more(EOM + start + tools))
    else:
        calls = r.trigger_rule("tool-call", tools)
    if request.tool_choice == "required":
        return r.gbnf(thoughts + start + calls, lazy=False)
    trailing = g.optional(EOM + start + calls)
    return r.gbnf(thoughts + start + (calls | (final + trailing)), lazy=True)


def _call_grammar(r: g.Rules, fn: Mapping[str, Any], string_value: g.Expr, strict: bool) -> g.Expr:
    """One call of ``fn``: its recipient, then its arguments in any order, any of them
    (``strict``: each required argument once, as ``required_arguments`` says)."""
    name = fn["name"]
    args: list[tuple[g.Expr, bool]] = []
    for param in tool_parameters(fn):
        if g.may_be_string(param.schema):
            value = string_value
        else:
            schema = g.schema(r.json(), f"tool-{name}-arg-{param.name}-schema", param.schema)
            value = g.tag(schema) + g.tag(g.lit(PARAM_CLOSE))
        arg_open = g.tag('<atem:parameter name="' + g.tag(g.lit(param.name)) + '">')
        args.append((g.tag(arg_open + value), param.required))
    body = tagged_arguments(r, f"tool-{name}-args", args, strict)
    call_open = g.tag(
        " to="
        + g.until("<|message|>")
        + "<|message|><atem:function_calls>"
        + g.space()
        + '<atem:invoke name="'
        + g.tag(g.lit(name))
        + '">'
        + g.space()
    )
    call_close = g.tag("</atem:invoke>" + g.space() + CALLS_CLOSE)
    return g.tag(call_open << g.tag(body) << call_close)
