"""DeepSeek V3.2 / V4: DSML calls (``<｜DSML｜invoke name="f">`` with typed parameters).

llama.cpp's handler "DeepSeek V3.2/V4". V4 names the call block ``tool_calls`` where V3.2
says ``function_calls``. Parameters carry a ``string="true|false"`` attribute that must be the
schema's verdict (a string parameter is raw text, others JSON), required ones in schema order.
With thinking on, the calls may begin inside the thought (at ``\\n\\n`` + block or the block);
if they do not parse there the thought reads on to ``</think>``. With thinking off the
generation prompt's pre-closed thought is consumed. Content may not open a ``<think>``; nothing
may follow the block (the parse fails). With tools and ``reasoning_format`` none every reply
fails, as in llama.cpp (the prompt's ``<think>`` meets the content's guard). With a response
format the thought is followed by one JSON value fenced as ```` ```json ... ``` ```` (tools
aside), and nothing after it; V4's template also gets the schema as ``response_format``.
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
    has_response_format,
    tools_offered,
    words,
)
from ..description import (
    Calls,
    CallSection,
    Content,
    ContentValue,
    End,
    Expect,
    NotMarker,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    Whitespace,
    steps,
)
from ..grammar import before_calls, reads_thought, spaced_arguments, tool_parameters
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import fenced_json
from ..schema import may_be_string, parameters
from . import has_markers

__all__ = [
    "NAME",
    "PRESERVED_TOKENS",
    "matches",
    "describe",
    "constraint_for",
    "grammar",
    "template_context",
]

NAME = "DeepSeek V3.2/V4"
REQUIRED = ("dsml_token", "DSML")
PREFIX = "<｜Assistant｜>"
DSML = "｜DSML｜"
THINK_START = "<think>"
THINK_END = "</think>"
PARAM_END = f"</{DSML}parameter>"
INVOKE_END = f"</{DSML}invoke>"
CONTINUATION = Continuation(PREFIX, think_start=THINK_START, think_end=THINK_END)
# V4 writes an empty thought as a bare </think>
CONTINUATION_V4 = Continuation(
    PREFIX, think_start=THINK_START, think_end=THINK_END, empty_thought=THINK_END
)


def _invoke(function: Mapping[str, Any]) -> peg.Parser:
    name = str(function["name"])
    required: list[peg.Parser] = []
    optional: list[peg.Parser] = []
    for pname, schema, is_required, root in parameters(function):
        is_string = may_be_string(schema, root)
        opener = peg.Seq(
            peg.Literal(f'<{DSML}parameter name="'),
            arg_name(pname),
            peg.Literal(f'" string="{"true" if is_string else "false"}">'),
        )
        value = (
            peg.Tag(t.TOOL_ARG_STRING_VALUE, peg.Until(PARAM_END))
            if is_string
            else peg.Tag(t.TOOL_ARG_VALUE, peg.json_value)
        )
        arg: peg.Parser = peg.Tag(
            t.TOOL_ARG,
            peg.Seq(
                peg.atomic_tag(t.TOOL_ARG_OPEN, opener),
                value,
                peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Literal(PARAM_END)),
            ),
        )
        (required if is_required else optional).append(arg)
    parts: list[peg.Parser] = []
    for i, arg in enumerate(required):
        parts += [peg.Space(), arg] if i else [arg]
    if optional:
        parts.append(peg.Repeat(peg.Seq(peg.Space(), peg.Choice(*optional))))
    opener = peg.Seq(peg.Literal(f'<{DSML}invoke name="'), tool_name(name), peg.Literal('">\n'))
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, opener),
            *parts,
            peg.Space(),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(INVOKE_END)),
        ),
    )


def matches(source: str) -> bool:
    # llama.cpp also asks for the call block's name (V3.2's or V4's)
    return has_markers(source, REQUIRED) and ("function_calls" in source or "tool_calls" in source)


def _block_name(source: str) -> str:
    """V4 names the call block ``tool_calls``, V3.2 ``function_calls``."""
    return "function_calls" if "function_calls" in source else "tool_calls"


def template_context(source: str, json_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """V4's template writes the response format into the system prompt: llama.cpp gives it
    the request's schema as ``response_format`` (V3.2's is given nothing)."""
    if json_schema and _block_name(source) == "tool_calls":
        return {"response_format": json_schema}
    return {}


def _reply(request: ReplyRequest) -> ReplyFormat:
    block_name = _block_name(request.source)
    is_v4 = block_name == "tool_calls"
    fc_start = f"<{DSML}{block_name}>"
    fc_end = f"</{DSML}{block_name}>"
    functions = tool_functions(request.tools)
    # a response format takes the place of the calls
    has_calls = bool(functions) and request.tool_choice != "none" and not request.json_schema
    reasoning: ReasoningBlock | None = None
    if request.reasoning_format != "none" and request.enable_thinking:
        call_stops = ("\n\n" + fc_start, fc_start) if has_calls else ()
        reasoning = ReasoningBlock(
            start=THINK_START,
            stops=(*call_stops, THINK_END),
            closers=((THINK_END, True),),
            space_after_start=False,
            call_stops=call_stops,
        )
    elif request.reasoning_format != "none":
        # the prompt's pre-closed thought: a bare </think> (V4) or an empty pair (V3.2)
        reasoning = ReasoningBlock(
            start=THINK_END if is_v4 else THINK_START,
            stops=() if is_v4 else (THINK_END,),
            closers=((THINK_END, True),),
            space_after_start=False,
            body="",
        )
    if not has_calls:
        # a response format: one fenced JSON value, and nothing after it
        body = ContentValue(fenced_json()) if request.json_schema else Content(None)
        return ReplyFormat(
            NAME,
            steps(Expect(PREFIX), Thought(reasoning) if reasoning else None, body, End()),
            continuation=CONTINUATION_V4 if is_v4 else CONTINUATION,
        )
    invoke = peg.Choice(*(_invoke(f) for f in functions))
    more: list[peg.Parser] = (
        [peg.Repeat(peg.Seq(peg.Space(), invoke))] if request.parallel_tool_calls else []
    )
    # the leading space: calls that begin inside a thought follow its `\n\n`
    block = peg.Seq(
        peg.Space(),
        peg.Literal(fc_start),
        peg.Space(),
        invoke,
        *more,
        peg.Space(),
        peg.Literal(fc_end),
    )
    section = CallSection(
        first=block,
        next=None,
        required=request.tool_choice == "required",
        commit=fc_end,
        openers=(fc_start,),
        tool_names=tool_names(functions),
        space_after=False,
    )
    return ReplyFormat(
        NAME,
        steps(
            Expect(PREFIX),
            Thought(reasoning) if reasoning else None,
            NotMarker(THINK_START),
            Content(("\n\n" + fc_start, fc_start)),
            Whitespace(),
            Calls(section),
            End(),
        ),
        continuation=CONTINUATION_V4 if is_v4 else CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup

PRESERVED_TOKENS = (DSML, THINK_START, THINK_END)


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text)."""
    # lazy whenever tools are offered and not required, tool_choice none beside a response
    # format included
    return constraint(
        PRESERVED_TOKENS,
        grammar=has_response_format(request) or calls_offered(request),
        lazy=tools_offered(request) and request.tool_choice != "required",
        triggers=words(f"<{DSML}{_block_name(request.source)}>"),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


# ------------------------------------------------------------------ llama.cpp's grammar


def _invoke_rule(r: g.Rules, function: Mapping[str, Any]) -> g.Expr:
    """The rule for one call: its parameters, required ones in schema order, then any optional
    ones, each ``string="true"`` (raw text) or ``"false"`` (JSON) as its schema says."""
    name = str(function["name"])
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for param in tool_parameters(function):
        rule_name = f"tool-{name}-arg-{param.name}"
        is_string = g.may_be_string(param.schema)
        opener = g.tag(
            g.lit(f'<{DSML}parameter name="')
            + g.tag(g.lit(param.name))
            + g.lit(f'" string="{"true" if is_string else "false"}">')
        )
        value = (
            g.tag(g.until(PARAM_END))
            if is_string
            else g.tag(g.schema(r.json(), f"{rule_name}-schema", param.schema))
        )
        arg = r.rule(rule_name, g.tag(opener + value + g.tag(g.lit(PARAM_END))))
        (required if param.required else optional).append(arg)
    args = spaced_arguments(required, optional)
    opener = g.tag(g.lit(f'<{DSML}invoke name="') + g.tag(g.lit(name)) + g.lit('">\n'))
    call = g.tag(opener + args + g.space() + g.tag(g.lit(INVOKE_END)))
    return r.rule(f"tool-{name}", call)


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought (with thinking on, the calls may
    begin inside it), then the response format's fenced JSON, or content and the call block."""
    block_name = _block_name(request.source)
    fc_start = f"<{DSML}{block_name}>"
    fc_end = f"</{DSML}{block_name}>"
    has_calls = calls_offered(request)
    required = request.tool_choice == "required"
    extract = reads_thought(request)
    r = g.Rules()
    invoke = g.choice()
    if has_calls:
        for function in tool_functions(request.tools):
            invoke = invoke | _invoke_rule(r, function)
    more = (g.zero_or_more(g.space() + invoke),) if request.parallel_tool_calls else ()
    block = r.trigger_rule(
        "tool-call", g.seq(fc_start, g.space(), invoke, *more, g.space(), fc_end)
    )
    calls = block if required else g.optional(block)
    reasoning = g.nothing()
    if extract and request.enable_thinking:
        reasoning = g.optional(THINK_START + g.tag(g.until(THINK_END)) + THINK_END)
        thought_stops = ("\n\n" + fc_start, fc_start, THINK_END)
        calls_in_thought = THINK_START + g.tag(g.until(*thought_stops)) + g.space() + block
    elif extract:
        # the prompt's pre-closed thought: a bare </think> (V4) or an empty pair (V3.2)
        reasoning = g.optional(
            g.lit(THINK_END)
            if block_name == "tool_calls"
            else g.lit(THINK_START) + g.until(THINK_END) + g.lit(THINK_END)
        )
    lazy = tools_offered(request) and not required
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
        fenced = r.rule("response-format", "```json" + g.space() + value + g.space() + "```")
        return r.gbnf(g.seq(PREFIX, reasoning, fenced), lazy=lazy)
    if not has_calls:
        return r.gbnf(g.seq(PREFIX, reasoning, g.tag(g.until())), lazy=lazy)
    content = before_calls(request, g.tag(g.until("\n\n" + fc_start, fc_start))) + g.space()
    if extract and request.enable_thinking:
        return r.gbnf(g.seq(PREFIX, calls_in_thought | (reasoning + content + calls)), lazy=lazy)
    return r.gbnf(g.seq(PREFIX, reasoning, content, calls), lazy=lazy)
