"""gpt-oss harmony replies (llama.cpp's "GPT-OSS" handler): channel messages, one call at most.

A reply is a run of messages ``<|start|>assistant<|channel|>CHANNEL<|message|>TEXT<|end|>``: the
analysis channel is reasoning (inline, markers and all, with reasoning_format none), commentary
without a recipient is content, and the last message is the final answer (its text is content
up to ``<|end|>``; the rest is dropped) or one tool call, its recipient ``to=functions.NAME`` in
the role header or in the channel header and its arguments JSON as the model wrote them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_offered,
    calls_or_json,
    has_response_format,
    patterns,
)
from ..description import (
    CallMessage,
    Flow,
    FlowState,
    Messages,
    ReplyFormat,
    TextMessage,
)
from ..grammar import calls_only
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import json_content
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "GPT-OSS"
REQUIRED = ("<|channel|>",)
START = "<|start|>assistant"
END = "<|end|>"
# the prefill: the analysis message, then (continuing the content) the final one
CONTINUATION = Continuation(
    START,
    think_start="<|channel|>analysis<|message|>",
    think_end=END + START + "<|channel|>final<|message|>",
)


def _tool(name: str) -> peg.Parser:
    channel = peg.Seq(
        peg.Literal("<|channel|>"), peg.Choice(peg.Literal("commentary"), peg.Literal("analysis"))
    )
    recipient = peg.Seq(peg.Literal(" to=functions."), tool_name(name))
    constraint = _constraint()
    args = peg.Tag(t.TOOL_ARGS, peg.json_value)
    # the recipient in the role header, or in the channel header
    in_role = peg.Seq(recipient, channel, constraint, peg.Literal("<|message|>"))
    in_channel = peg.Seq(channel, recipient, constraint, peg.Literal("<|message|>"))
    return peg.Choice(
        peg.Tag(t.TOOL, peg.Seq(peg.atomic_tag(t.TOOL_OPEN, in_role), args)),
        peg.Tag(t.TOOL, peg.Seq(peg.atomic_tag(t.TOOL_OPEN, in_channel), args)),
    )


# the content type after a call's or a response format's channel: read and kept nowhere;
# ``json`` (what the template writes) is markup, another word is reported as skipped text
CONTENT_TYPE = t.markup_tag("json")


def _constraint() -> peg.Parser:
    """`` <|constrain|>json`` (or any type name) after a recipient or a channel."""
    return peg.optional(
        peg.Seq(
            peg.Space(),
            peg.optional(peg.Literal("<|constrain|>")),
            peg.Tag(
                CONTENT_TYPE,
                peg.Chars(
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-", 1, -1
                ),
            ),
        )
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    start = peg.Literal(START)
    end = peg.Literal(END)
    # gpt-oss-20b sometimes opens a message with a stray commentary channel
    stray = peg.optional(
        peg.Seq(peg.Literal("<|channel|>commentary"), peg.optional(peg.Literal(" to=assistant")))
    )
    analysis_header = peg.Seq(stray, peg.Literal("<|channel|>analysis<|message|>"))
    if request.reasoning_format != "none":
        analysis = TextMessage(
            analysis_header, "reasoning", (END,), end, lead=start, then="messages"
        )
    else:
        analysis = TextMessage(
            analysis_header, "content", (END,), end, lead=start, wrap="content", then="messages"
        )
    preamble = TextMessage(
        peg.Literal("<|channel|>commentary<|message|>"),
        "content",
        (END,),
        end,
        lead=start,
        then="messages",
    )
    final = TextMessage(
        peg.Seq(stray, peg.Literal("<|channel|>final<|message|>")), "content", (END,), lead=start
    )
    channel = peg.Seq(
        peg.Literal("<|channel|>"), peg.Choice(peg.Literal("commentary"), peg.Literal("analysis"))
    )
    # a call to a builtin tool (to=python, to=container.exec): read, kept nowhere
    unsolicited = TextMessage(
        peg.Seq(peg.optional(channel), peg.Literal(" to=")), "", (END,), end, lead=start
    )
    if request.json_schema:
        # a response format: analysis messages, then the final message holding one JSON value
        # (its text is the content; what follows it is dropped)
        value = CallMessage(
            peg.Seq(
                start,
                peg.Literal("<|channel|>final"),
                _constraint(),
                peg.Literal("<|message|>"),
                json_content(),
            )
        )
        flow = Flow(
            states={
                "messages": FlowState((analysis,), otherwise="last", loop=True),
                "last": FlowState((value,)),
            },
            start="messages",
        )
        return ReplyFormat(
            NAME, (Messages(flow),), stop=("<|return|>", "<|call|>"), continuation=CONTINUATION
        )
    functions = tool_functions(request.tools)
    last: tuple[TextMessage | CallMessage, ...]
    if functions and request.tool_choice != "none":
        call = CallMessage(
            peg.Seq(start, peg.Choice(*(_tool(str(fn["name"])) for fn in functions)))
        )
        last = (call,) if request.tool_choice == "required" else (call, final)
    else:
        last = (final, unsolicited)
    flow = Flow(
        states={
            "messages": FlowState((preamble, analysis), otherwise="last", loop=True),
            "last": FlowState(last),
        },
        start="messages",
        openers=(START + " to=functions.", " to=functions.", "<|channel|>"),
        name_marker=" to=functions.",
        name_marker_end="<|channel|>",
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME, (Messages(flow),), stop=("<|return|>", "<|call|>"), continuation=CONTINUATION
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = ("<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", END)
TRIGGERS = patterns(
    r"^\s+to$",
    r"^<\|channel\|>(?:commentary|analysis)\s+to=functions$",
    r"<\|start\|>assistant(\s+to)",
    r"<\|start\|>assistant(<\|channel\|>(?:commentary|analysis)\s+to)",
)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    return calls_or_json(request, PRESERVED_TOKENS, TRIGGERS)


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar text


def _call_schema(function: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema of a call's arguments as llama.cpp reads it: the tool's ``parameters``, or an
    object without properties when those are missing, null or an empty object."""
    params = function.get("parameters")
    if params is None or (isinstance(params, Mapping) and not params):
        return {"type": "object", "properties": {}}
    return params


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): analysis and preamble messages, then the
    last message, a call (its recipient in the role or the channel header, its arguments JSON
    as the tool's schema says), the final answer, or the response format's JSON."""
    r = g.Rules()
    start = r.rule("start", g.lit(START))
    end = r.rule("end", g.lit(END))
    text = r.rule("message-content", g.until(END))
    channel = "<|channel|>" + g.choice("commentary", "analysis")
    content_type = g.chars("[A-Za-z0-9_-]", 1, -1)
    stray = g.optional("<|channel|>commentary" + g.optional(" to=assistant"))
    analysis_open = stray + "<|channel|>analysis<|message|>"
    if request.reasoning_format != "none":
        analysis = r.rule("analysis", analysis_open + g.tag(text) + end)
    else:
        analysis = r.rule("analysis", g.tag(analysis_open + text + end))
    preamble = r.rule("preamble", "<|channel|>commentary<|message|>" + g.tag(text) + end)
    final = r.rule("final", stray + "<|channel|>final<|message|>" + g.tag(text))
    unsolicited = r.rule("unsolicited", g.tag(g.optional(channel) + " to=" + text + end))
    other = r.rule("any", preamble | analysis)
    lazy = calls_offered(request) and request.tool_choice != "required"
    if has_response_format(request):
        json_value = g.schema(r.json(), "response-format-schema", request.json_schema)
        response = r.rule(
            "response-format",
            "<|channel|>final" + _content_type(content_type) + "<|message|>" + g.tag(json_value),
        )
        return r.gbnf(g.zero_or_more(start + analysis) + start + response, lazy=False)
    if not calls_offered(request):
        return r.gbnf(g.zero_or_more(start + other) + start + (final | unsolicited), lazy=False)
    tools = g.choice()
    for fn in tool_functions(request.tools):
        name = fn["name"]
        recipient = " to=functions." + g.tag(g.lit(name))
        args = g.tag(g.schema(r.json(), f"tool-{name}-schema", _call_schema(fn)))
        header_end = _content_type(content_type) + "<|message|>"
        in_role = g.tag(g.tag(recipient + channel + header_end) + args)
        in_channel = g.tag(g.tag(channel + recipient + header_end) + args)
        tools = tools | r.rule(f"tool-{name}", in_role | in_channel)
    call = r.trigger_rule("tool-call", tools)
    if calls_only(request):  # the guaranteed policy: thoughts, then the call (no preamble)
        return r.gbnf(g.zero_or_more(start + analysis) + start + call, lazy=lazy)
    if request.tool_choice == "required":
        return r.gbnf(g.zero_or_more(start + other) + start + call, lazy=lazy)
    return r.gbnf(g.zero_or_more(start + other) + start + (call | final), lazy=lazy)


def _content_type(name: g.Expr) -> g.Expr:
    """`` <|constrain|>TYPE`` after a recipient or a channel (optional)."""
    return g.optional(g.space() + g.optional("<|constrain|>") + name)
