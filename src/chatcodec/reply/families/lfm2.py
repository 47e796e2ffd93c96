"""LFM2 / LFM2.5: Python-style calls ``[name(arg="v", n=1)]`` between tool-call markers.

llama.cpp's "LFM2" handler; its "LFM2.5" handler (``lfm25.py``) reads replies the same way. The
reply is ``<|im_start|>assistant\\n`` (the generation prompt), an optional ``<think>`` block
(read only with reasoning extraction on and a template that has ``<think>``), the content up
to ``<|tool_call_start|>``, then exactly one ``<|tool_call_start|>[...]<|tool_call_end|>``
section and the end of the reply. Arguments are ``name=value`` in the model's order: a
``string`` parameter takes a quoted string, any other a Python or JSON value; each value is
turned into JSON (single quotes to double, ``True``/``False``/``None`` to JSON literals) and
the call's arguments are compact JSON built around them. Text after the section, a second
call when ``parallel_tool_calls`` is false, or an unknown tool make the parse fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import ReplyError
from ...grammar import rules as g
from .. import mapper as t
from .. import peg
from ..arguments import arg_name, tool_functions, tool_name
from ..auto import analysis_for
from ..auto.analysis import T_JSON, Tools
from ..auto.build import json_call
from ..constraint import (
    Constraint,
    calls_or_json,
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
    ReasoningBlock,
    ReplyFormat,
    Thought,
    steps,
)
from ..grammar import before_calls, calls_only, python_style_calls, reads_thought
from ..prefill import Continuation
from ..request import ReplyRequest
from ..response_format import json_content
from ..schema import parameters
from . import has_markers

__all__ = ["NAME", "matches", "describe", "reply_format", "constraint_for", "grammar"]

NAME = "LFM2"
REQUIRED = ("<|tool_list_start|>", "<|tool_list_end|>")
PREFIX = "<|im_start|>assistant\n"
CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"
CONTINUATION = Continuation(PREFIX, think_start="<think>", think_end="</think>")
THOUGHT = ReasoningBlock(
    start="<think>", stops=("</think>",), closers=(("</think>", True),), space_after_start=False
)


def _call(fn: Mapping[str, Any]) -> peg.Parser:
    """``name(`` arguments ``)``: every argument ``name=value``, separated by ``,`` + space."""
    arguments: list[peg.Parser] = []
    for name, schema, _required, _root in parameters(fn):
        is_string = isinstance(schema, Mapping) and schema.get("type") == "string"
        value = peg.python_string if is_string else peg.python_or_json_value
        arguments.append(
            peg.Tag(
                t.TOOL_ARG,
                peg.Seq(
                    peg.atomic_tag(t.TOOL_ARG_OPEN, peg.Seq(arg_name(name), peg.Literal("="))),
                    peg.Tag(t.TOOL_ARG_VALUE, value),
                    peg.atomic_tag(t.TOOL_ARG_CLOSE, peg.Eps()),
                ),
            )
        )
    args: peg.Parser = peg.Eps()
    if arguments:
        one = peg.Choice(*arguments)
        args = peg.Seq(one, peg.Repeat(peg.Seq(peg.Literal(","), peg.Space(), one)))
    opener = peg.atomic_tag(t.TOOL_OPEN, peg.Seq(tool_name(str(fn["name"])), peg.Literal("(")))
    closer = peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(")"))
    return peg.Tag(
        t.TOOL, peg.Seq(opener, peg.Space(), peg.Tag(t.TOOL_ARGS, args), peg.Space(), closer)
    )


def _written_json(request: ReplyRequest) -> Tools | None:
    """Under the guaranteed policy, the JSON calls the template writes in the family's
    markers (``<|tool_call_start|>[{"name": ..., "arguments": ...}]``), as the auto parser's
    analysis of its renders finds them; None where it writes none (docs/differences.md, G3)."""
    if request.policy != "guaranteed":
        return None
    try:
        tl = analysis_for(request.source, request.special_tokens, "guaranteed").tools
    except ReplyError:
        return None
    flat = "." not in tl.name_field + tl.args_field + tl.id_field and not tl.fun_name_is_key
    markers = (tl.section_start, tl.section_end) == (CALL_START, CALL_END)
    if tl.mode != T_JSON or not tl.tools_array_wrapped or not markers or not flat:
        return None
    # the id, where the template writes one, is read where present (a model may leave it out)
    return replace(tl, id_field="", history_id_field=tl.id_field or tl.history_id_field)


def _section(
    functions: Sequence[Mapping[str, Any]], parallel: bool, written: Tools | None = None
) -> peg.Parser:
    """The one call section: ``<|tool_call_start|>[call, ...]<|tool_call_end|>``; each call
    Python-style, or (``written``) JSON as the template writes it."""
    options = [_call(fn) for fn in functions]
    if written is not None:
        options += [json_call(written, str(fn["name"])) for fn in functions]
    call = peg.Choice(*options)
    calls: peg.Parser = call
    if parallel:
        calls = peg.Seq(call, peg.Repeat(peg.Seq(peg.Literal(","), peg.Space(), call)))
    return peg.Seq(
        peg.Literal(CALL_START),
        peg.Literal("["),
        peg.Space(),
        calls,
        peg.Space(),
        peg.Literal("]"),
        peg.Literal(CALL_END),
    )


def matches(source: str) -> bool:
    return has_markers(source, REQUIRED)


def describe(request: ReplyRequest) -> ReplyFormat:
    fmt = reply_format(NAME, request)
    return replace(fmt, constraint=constraint_for(request, tool_list_tokens=True))


def reply_format(name: str, request: ReplyRequest) -> ReplyFormat:
    """The reply format of LFM2 and LFM2.5 (``name``: the handler's)."""
    thinking = request.reasoning_format != "none" and "<think>" in request.source
    reasoning = THOUGHT if thinking else None
    functions = tool_functions(request.tools)
    stop = ("<|im_end|>",)
    if not functions or request.tool_choice == "none":
        # a response format makes the content one JSON value
        value = json_content() if request.json_schema else None
        return ReplyFormat(
            name,
            steps(
                Expect(PREFIX),
                Thought(reasoning) if reasoning else None,
                ContentValue(value) if value is not None else Content(None),
                End(),
            ),
            stop=stop,
            continuation=CONTINUATION,
        )
    section = CallSection(
        first=_section(functions, request.parallel_tool_calls, _written_json(request)),
        next=None,
        required=False,  # the section is not optional anyway: a failed one fails the parse
        commit=CALL_END,
        openers=(CALL_START,),
        space_after=False,
    )
    return ReplyFormat(
        name,
        steps(
            Expect(PREFIX),
            Thought(reasoning) if reasoning else None,
            Content((CALL_START,)),
            Calls(section),
            End(),
        ),
        stop=stop,
        continuation=CONTINUATION,
    )


# ------------------------------------------------------------------ llama.cpp's sampler setup


def constraint_for(request: ReplyRequest, tool_list_tokens: bool) -> Constraint:
    """llama.cpp's grammar setup for this request (everything but the grammar's text); LFM2
    also preserves its tool-list markers (``tool_list_tokens``), LFM2.5 does not."""
    tokens: tuple[str, ...] = (CALL_START, CALL_END, "<think>", "</think>")
    if tool_list_tokens:
        tokens += REQUIRED
    return calls_or_json(request, tokens, words(CALL_START))


def grammar(request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request (GBNF), LFM2's and LFM2.5's alike: the optional
    thought, then the response format's JSON, or the content and the one call section."""
    r = g.Rules()
    reasoning = g.nothing()
    if reads_thought(request) and "<think>" in request.source:
        reasoning = g.optional("<think>" + g.tag(g.until("</think>")) + "</think>")
    json_reply = has_response_format(request)
    if not tools_offered(request) or request.tool_choice == "none":
        if json_reply:
            value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
            return r.gbnf(g.seq(PREFIX, reasoning, value, g.nothing()), lazy=False)
        return r.gbnf(g.seq(PREFIX, reasoning, g.tag(g.until()), g.nothing()), lazy=False)
    strict = calls_only(request)
    parallel = request.parallel_tool_calls
    calls = python_style_calls(r, request.tools, parallel, json_literals=True, strict=strict)
    tool_calls = r.rule("tool-calls", r.trigger_rule("tool-call", CALL_START + calls + CALL_END))
    content = before_calls(request, g.tag(g.until(CALL_START)))
    lazy = not (json_reply or request.tool_choice == "required")
    return r.gbnf(g.seq(PREFIX, reasoning, content, tool_calls, g.nothing()), lazy=lazy)
