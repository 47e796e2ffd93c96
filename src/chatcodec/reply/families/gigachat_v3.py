"""GigaChat V3 replies (llama.cpp's "GigaChatV3" handler): content, then at most one JSON call.

``assistant<|role_sep|>\\n`` content, then ``<|message_sep|>\\n\\nfunction call<|role_sep|>\\n``
and ``{"name": "NAME", "arguments": {...}}`` (arguments as the model wrote them). One call at
most, whatever parallel_tool_calls says; text after it is dropped.
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
    tools_offered,
    words,
)
from ..description import (
    Calls,
    CallSection,
    Content,
    Expect,
    ReplyFormat,
    Whitespace,
)
from ..grammar import calls_only, parameters_node
from ..prefill import Continuation
from ..request import ReplyRequest
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "GigaChatV3"
REQUIRED = ("<|role_sep|>", "<|message_sep|>")
EXCLUDED = ("<|function_call|>",)
PREFIX = "assistant<|role_sep|>\n"
SEPARATOR = "<|message_sep|>\n\n"
CALL_START = SEPARATOR + "function call<|role_sep|>\n"
CONTINUATION = Continuation(PREFIX, content_always=True)


def _call(name: str) -> peg.Parser:
    ws = peg.Space()
    opener = peg.atomic_tag(
        t.TOOL_OPEN,
        peg.Seq(
            peg.Literal("{"),
            ws,
            peg.Literal('"name"'),
            ws,
            peg.Literal(":"),
            ws,
            peg.Literal('"'),
            tool_name(name),
            peg.Literal('"'),
        ),
    )
    return peg.Seq(
        opener,
        ws,
        peg.Literal(","),
        ws,
        peg.Literal('"arguments"'),
        ws,
        peg.Literal(":"),
        ws,
        peg.Tag(t.TOOL_ARGS, peg.json_value),
        ws,
        peg.Literal("}"),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED, EXCLUDED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    functions = tool_functions(request.tools)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(NAME, (Expect(PREFIX), Content(None)), continuation=CONTINUATION)
    call = peg.Seq(
        peg.Literal(CALL_START), peg.Choice(*(_call(str(fn["name"])) for fn in functions))
    )
    section = CallSection(
        first=call,
        next=None,
        required=request.tool_choice == "required",
        commit="",
        openers=(CALL_START,),
        name_marker='"name"',
        name_marker_end=",",
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME,
        (Expect(PREFIX), Content((SEPARATOR,)), Whitespace(), Calls(section)),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (SEPARATOR, "<|role_sep|>\n")


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    # a response format gets no grammar here
    return constraint(
        PRESERVED_TOKENS,
        grammar=calls_offered(request),
        lazy=tools_offered(request) and request.tool_choice == "auto",
        triggers=words(CALL_START),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the prefix, the content, then at most one
    ``{"name": ..., "arguments": ...}`` call after its marker (arguments as the tool's schema
    says). A response format adds nothing: llama.cpp sets a grammar for calls only."""
    r = g.Rules()
    lazy = tools_offered(request) and request.tool_choice == "auto"
    if not calls_offered(request):
        return r.gbnf(PREFIX + g.tag(g.until()), lazy=lazy)
    tools = g.choice()
    for fn in tool_functions(request.tools):
        name = str(fn["name"])
        name_member = r.json_member("name", '"' + g.tag(g.lit(name)) + '"')
        args = g.tag(g.schema(r.json(), f"tool-{name}-schema", parameters_node(fn)))
        opener = g.tag("{" << name_member)
        tools = tools | r.rule(
            f"tool-{name}", opener << "," << r.json_member("arguments", args) << "}"
        )
    least = 1 if request.tool_choice == "required" else 0
    call = r.rule("tool-call", CALL_START + tools)
    calls = r.trigger_rule("tool-call-root", g.repeat(call, least, 1))
    if calls_only(request):  # the guaranteed policy: the call right after the prefix
        return r.gbnf(PREFIX + calls, lazy=lazy)
    return r.gbnf(PREFIX + (g.tag(g.until(SEPARATOR)) << calls), lazy=lazy)
