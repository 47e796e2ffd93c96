"""gpt-oss harmony replies (llama.cpp's "GPT-OSS" handler): channel messages, one call at most.

A reply is a run of messages ``<|start|>assistant<|channel|>CHANNEL<|message|>TEXT<|end|>``: the
analysis channel is reasoning (inline, markers and all, with reasoning_format none), commentary
without a recipient is content, and the last message is the final answer (its text is content
up to ``<|end|>``; the rest is dropped) or one tool call, its recipient ``to=functions.NAME`` in
the role header or in the channel header and its arguments JSON as the model wrote them.
"""

from __future__ import annotations

from dataclasses import replace

from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_or_json,
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
from ..prefill import Continuation
from ..request import ReplyRequest
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for"]

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
                peg.Tag("content", peg.json_value),
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
