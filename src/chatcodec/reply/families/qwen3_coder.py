"""Qwen3-Coder XML calls: Qwen3-Coder, Qwen3.5, Nemotron-3 Nano, StepFun-3.5 (llama.cpp's handler).

With a response format the reply is the thought, then one JSON value (tools aside); what
follows the value is dropped, text that is no JSON value fails the parse.
"""

from __future__ import annotations

from dataclasses import replace

from ...grammar import rules as g
from .. import peg
from ..arguments import XmlCallSyntax, tool_functions, tool_names, xml_call_parsers
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
    Expect,
    ReasoningBlock,
    ReplyFormat,
    Thought,
    Whitespace,
    steps,
)
from ..grammar import calls_only, reads_thought, tool_parameters
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import json_content

__all__ = ["NAME", "matches", "describe", "constraint_for", "grammar"]

NAME = "Qwen3-Coder"
PREFIX = "<|im_start|>assistant\n"
# the prefill: the thought (templates with one), then the content
CONTINUATION = Continuation(PREFIX, think_start="<think>\n", think_end="\n</think>\n\n")
CONTINUATION_NO_THOUGHT = Continuation(PREFIX)
SYNTAX = XmlCallSyntax(
    scope_open="<tool_call>\n",
    function_open="<function=",
    function_name_end=">\n",
    function_close="</function>\n",
    scope_close="</tool_call>",
    param_open="<parameter=",
    param_name_end=">\n",
    param_close="\n</parameter>\n",
)
THOUGHT = ReasoningBlock(
    start="<think>",
    stops=("</think>", "<tool_call>"),
    # llama.cpp ends a thought at </think> (consumed) or at <tool_call> (left for the call)
    closers=(("</think>", True), ("<tool_call>", False)),
)
# under the guaranteed policy, a thought before a response format's value: no call can follow
# it, so <tool_call> is thought text (llama.cpp ends the thought there and the value then fails)
THOUGHT_BEFORE_VALUE = replace(THOUGHT, stops=("</think>",), closers=(("</think>", True),))


def matches(source: str) -> bool:
    """llama.cpp's dispatch rule for this handler (checked after the other specialized ones)."""
    return (
        "<tool_call>" in source
        and "<function=" in source
        and "<parameter=" in source
        and "'<tool_call><function=' ~ tool_call.name ~ '>'" not in source
    )


def _reply(request: ReplyRequest) -> ReplyFormat:
    thinking = "<think>" in request.source
    # Qwen3-Coder (no <think> in its template) may open a call with a bare <function=NAME>
    bare_function = not thinking
    reasoning = THOUGHT if thinking and request.reasoning_format != "none" else None
    functions = tool_functions(request.tools)
    if request.json_schema or not functions or request.tool_choice == "none":
        # a response format makes the content one JSON value (tools aside); what follows it
        # is dropped
        value = json_content() if request.json_schema else None
        if reasoning is not None and value is not None and request.policy == "guaranteed":
            reasoning = THOUGHT_BEFORE_VALUE
        return ReplyFormat(
            NAME,
            steps(
                Expect(PREFIX),
                Thought(reasoning) if reasoning else None,
                Whitespace(),
                ContentValue(value) if value is not None else Content(None),
            ),
            stop=("<|im_end|>",),
            continuation=CONTINUATION if thinking else CONTINUATION_NO_THOUGHT,
        )
    body = peg.Seq(xml_call_parsers(SYNTAX, functions), peg.Literal(SYNTAX.scope_close))
    call = peg.Seq(peg.Literal(SYNTAX.scope_open), body)
    first = peg.Seq(peg.optional(peg.Literal(SYNTAX.scope_open)), body) if bare_function else call
    starts = ["<tool_call>"]
    if bare_function:
        starts += [f"{SYNTAX.function_open}{fn['name']}>" for fn in functions]
    section = CallSection(
        first=first,
        next=call if request.parallel_tool_calls else None,
        required=request.tool_choice == "required",
        commit=SYNTAX.scope_close,
        openers=("<tool_call>", SYNTAX.function_open),
        name_marker=SYNTAX.function_open,
        name_marker_end=">",
        tool_names=tool_names(functions),
    )
    return ReplyFormat(
        NAME,
        steps(
            Expect(PREFIX),
            Thought(reasoning) if reasoning else None,
            Whitespace(),
            Content(tuple(starts)),
            Whitespace(),
            Calls(section),
        ),
        stop=("<|im_end|>",),
        continuation=CONTINUATION if thinking else CONTINUATION_NO_THOUGHT,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup


def constraint_for(request: ReplyRequest) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text): a
    template with ``<think>`` preserves the thought's markers too; the lazy grammar wakes at
    ``<tool_call>`` and, for Qwen3-Coder (no thought), at each tool's bare ``<function=NAME>``."""
    thinking = "<think>" in request.source
    tokens = ("<tool_call>", "</tool_call>") + (("<think>", "</think>") if thinking else ())
    starts = ["<tool_call>"]
    if not thinking:
        starts += [f"{SYNTAX.function_open}{fn['name']}>" for fn in tool_functions(request.tools)]
    lazy = tools_offered(request) and request.tool_choice == "auto"
    return constraint(
        tokens,
        grammar=has_response_format(request) or calls_offered(request),
        lazy=lazy,
        triggers=words(*starts) if lazy else (),
    )


def describe(request: ReplyRequest) -> ReplyFormat:
    return replace(_reply(request), constraint=constraint_for(request))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF): the thought, then the response format's JSON
    or the calls, each argument's value as its schema says (a string: any text up to the
    parameter's close)."""
    thinking = "<think>" in request.source
    r = g.Rules()
    reasoning = g.nothing()
    if thinking and reads_thought(request):
        reasoning = g.optional(
            "<think>"
            + g.space()
            + g.tag(g.until("</think>", "<tool_call>"))
            + g.choice("</think>", g.nothing())
        )
    lazy = tools_offered(request) and request.tool_choice == "auto"
    if has_response_format(request):
        value = g.tag(g.schema(r.json(), "response-format", request.json_schema))
        return r.gbnf(g.seq(PREFIX, reasoning << value), lazy=lazy)
    arg_close = g.tag(g.lit(SYNTAX.param_close))
    arg_string = r.rule("xml-arg-string", g.up_to(SYNTAX.param_close))
    tools = g.choice()
    for fn in tool_functions(request.tools):
        name = fn["name"]
        required: list[g.Expr] = []
        optional: list[g.Expr] = []
        for param in tool_parameters(fn):
            rule_name = f"tool-{name}-arg-{param.name}"
            arg_open = g.tag("<parameter=" + g.tag(g.lit(param.name)) + ">\n")
            types = param.types
            if "string" not in types:
                value = g.tag(g.schema(r.json(), f"{rule_name}-schema", param.schema)) + arg_close
            elif types == {"string"}:
                value = arg_string
            else:
                # the grammar keeps only the raw string (it accepts any text anyway)
                value = g.raw(
                    g.tag(r.json_alternatives(types) + arg_close) | arg_string, "xml-arg-string"
                )
            arg = r.rule(rule_name, g.tag(arg_open + value))
            (required if param.required else optional).append(arg)
        args = r.permute(f"tool-{name}-args", required)
        if optional:
            args = args + g.zero_or_more(g.choice(*optional))
        call = g.tag(
            g.tag("<function=" + g.tag(g.lit(name)) + ">\n")
            + g.tag(args)
            + g.tag(g.lit(SYNTAX.function_close))
        )
        tools = tools | r.rule(f"tool-{name}", call)
    body = tools + "</tool_call>" + g.space()
    call = r.rule("tool-call", "<tool_call>\n" + body)
    first = r.rule("tool-call-first", g.optional("<tool_call>\n") + body) if not thinking else call
    calls = first + g.zero_or_more(call) if request.parallel_tool_calls else first
    least = 1 if request.tool_choice == "required" else 0
    tool_calls = r.trigger_rule("tool-call-root", g.repeat(calls, least, 1))
    starts = ["<tool_call>"]
    if not thinking:
        starts += [f"{SYNTAX.function_open}{fn['name']}>" for fn in tool_functions(request.tools)]
    # under the guaranteed policy a required call comes right after the thought
    lead = reasoning if calls_only(request) else reasoning << g.tag(g.until(*starts))
    return r.gbnf(g.seq(PREFIX, lead << tool_calls), lazy=lazy)
