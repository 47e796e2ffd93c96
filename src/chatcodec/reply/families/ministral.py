"""Ministral 3 / Magistral / Devstral: ``[THINK]...[/THINK]`` then ``[TOOL_CALLS]name[ARGS]{json}``.

llama.cpp's "Ministral/Magistral Large 3" handler. The generation prompt is empty. A thought
is read only with reasoning extraction on (otherwise ``[THINK]`` stays in the content); the
content runs up to the first ``[TOOL_CALLS]`` after optional whitespace; each call is
``[TOOL_CALLS]`` + a declared tool name + ``[ARGS]`` + one JSON value, handed out as the
model wrote it. There is no end anchor: text after the calls, a call to an unknown tool and
calls beyond the first when ``parallel_tool_calls`` is false are dropped, not errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import tool_functions, tool_name, tool_names
from ..constraint import (
    Constraint,
    calls_offered,
    constraint,
    has_response_format,
    tools_offered,
    words,
)
from ..description import (
    Balance,
    Calls,
    CallSection,
    Content,
    ContentValue,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    Whitespace,
    steps,
)
from ..grammar import calls_only, parameters_node, reads_thought
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import fenced_json
from . import has_markers

__all__ = ["NAME", "PRESERVED_TOKENS", "matches", "describe", "constraint_for", "grammar"]

NAME = "Ministral/Magistral Large 3"
REQUIRED = ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")
EXCLUDED = ("[CALL_ID]",)
CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CONTINUATION = Continuation("", think_start="[THINK]", think_end="[/THINK]")
THOUGHT = ReasoningBlock(
    start="[THINK]", stops=("[/THINK]",), closers=(("[/THINK]", True),), space_after_start=False
)


def _call(functions: Sequence[Mapping[str, Any]]) -> peg.Parser:
    """``[TOOL_CALLS]`` and one call: a declared name, ``[ARGS]``, a JSON value (raw)."""
    choices: list[peg.Parser] = []
    for fn in functions:
        opener = peg.atomic_tag(t.TOOL_OPEN, peg.Seq(tool_name(str(fn["name"])), peg.Literal(ARGS)))
        choices.append(peg.Seq(opener, peg.Tag(t.TOOL_ARGS, peg.json_value)))
    return peg.Seq(peg.Literal(CALLS), peg.Choice(*choices))


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED, EXCLUDED)


def _reply(request: ReplyRequest) -> ReplyFormat:
    reasoning = THOUGHT if request.reasoning_format != "none" else None
    if request.json_schema:
        # a response format wins over tools: the JSON fenced in ```json ... ```
        return ReplyFormat(
            NAME,
            steps(
                Thought(reasoning) if reasoning else None,
                Whitespace(),
                ContentValue(fenced_json()),
            ),
            continuation=CONTINUATION,
        )
    functions = tool_functions(request.tools)
    if not functions or request.tool_choice == "none":
        return ReplyFormat(
            NAME,
            steps(Thought(reasoning) if reasoning else None, Whitespace(), Content(None)),
            continuation=CONTINUATION,
        )
    call = _call(functions)
    section = CallSection(
        first=call,
        next=call if request.parallel_tool_calls else None,
        required=request.tool_choice == "required",
        commit=Balance("{", "}", '"'),
        openers=(CALLS,),
        name_marker=CALLS,
        name_marker_end=ARGS,
        tool_names=tool_names(functions),
        space_after=False,
    )
    return ReplyFormat(
        NAME,
        steps(
            Thought(reasoning) if reasoning else None,
            Whitespace(),
            Content((CALLS,)),
            Whitespace(),
            Calls(section),
        ),
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = ("[THINK]", "[/THINK]", CALLS, ARGS)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    # a grammar unless the reply is plain content; lazy for tools under auto, even beside a
    # response format
    return constraint(
        PRESERVED_TOKENS,
        grammar=has_response_format(request) or calls_offered(request),
        lazy=tools_offered(request) and request.tool_choice == "auto",
        triggers=words(CALLS),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought, then the response format's
    JSON fenced in ```json, or the content and the ``[TOOL_CALLS]name[ARGS]{json}`` calls (each
    call's arguments as its schema says)."""
    r = g.Rules()
    reasoning = g.nothing()
    if reads_thought(request):
        reasoning = g.optional("[THINK]" + g.tag(g.until("[/THINK]")) + "[/THINK]")
    lazy = tools_offered(request) and request.tool_choice == "auto"
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format", request.json_schema))
        return r.gbnf(g.nothing() + (reasoning << "```json" << value << "```"), lazy=lazy)
    if not calls_offered(request):
        return r.gbnf(g.nothing() + (reasoning << g.tag(g.until())), lazy=lazy)
    tools = g.choice()
    for fn in tool_functions(request.tools):
        name = str(fn["name"])
        opener = g.tag(g.tag(g.lit(name)) + ARGS)
        args = g.tag(g.schema(r.json(), f"tool-{name}-schema", parameters_node(fn)))
        tools = tools | r.rule(f"tool-{name}", opener + args)
    least = 1 if request.tool_choice == "required" else 0
    most = -1 if request.parallel_tool_calls else 1
    calls = r.trigger_rule("tool-call", g.repeat(CALLS + tools, least, most))
    # under the guaranteed policy a required call comes right after the thought
    lead = reasoning if calls_only(request) else reasoning << g.tag(g.until(CALLS))
    return r.gbnf(g.nothing() + (lead << calls), lazy=lazy)
