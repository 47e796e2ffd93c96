"""An analysis + a request -> the grammar (GBNF) llama.cpp's auto parser generator sets.

llama.cpp compiles the same PEG it parses with (:mod:`.build` is its parse side), so this
module writes that PEG again with the grammar combinators: the generation prompt's prefix, the
thought, then a response format's JSON value, or the content before the calls and the calls
in the analysed format (JSON, a tag with JSON arguments, a tag with tagged arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...grammar import rules as g
from ..grammar import (
    JsonLayout,
    before_calls,
    calls_only,
    optspace,
    prefix,
    reads_thought,
    spaced_arguments,
    standard_json_tools,
    tool_parameters,
    tool_schema,
)
from ..request import ReplyRequest
from .analysis import ID_BETWEEN, R_NONE, T_JSON, T_TAG_JSON, T_TAG_TAGGED, Analysis, Tools
from .diff import trim

__all__ = ["grammar_for"]


def grammar_for(a: Analysis, request: ReplyRequest) -> str:
    """llama.cpp's grammar for this request under the analysed template (lazy, from the call
    rules, when tools are offered under ``auto`` and no response format is asked for)."""
    r = g.Rules()
    extracting = reads_thought(request) and a.reasoning.mode != R_NONE
    reasoning = _reasoning(a, extracting)
    tools = request.tools or ()
    pure = a.reasoning.mode == R_NONE
    if request.json_schema:
        value = g.tag(g.schema(r.json(), "response-format-schema", request.json_schema))
        response = r.rule("response-format", value)
        body = reasoning + g.space()
        body = body + g.choice(
            "```json" + g.space() + response + g.space() + "```",
            g.space() + response + g.space(),
        )
        reply = body + g.nothing()
        pure = False
    elif tools and request.tool_choice != "none" and a.supports_tool_calls:
        reply = _tools(r, a, request, reasoning)
        pure = False
    else:
        reply = _content(a, reasoning, extracting)
    lead = prefix(request.generation_prompt, trim(a.reasoning.start))
    root = lead + reply if pure else lead << reply
    lazy = not request.json_schema and request.tool_choice == "auto"
    return r.gbnf(root, lazy=lazy)


def _reasoning(a: Analysis, extracting: bool) -> g.Expr:
    """The thought between its markers (their surrounding whitespace optional), when read."""
    rs = a.reasoning
    if not extracting or not rs.end:
        return g.nothing()
    thought = g.tag(g.until(trim(rs.end))) + optspace(rs.end)
    return g.optional(optspace(rs.start) + thought if rs.start else thought)


def _content(a: Analysis, reasoning: g.Expr, extracting: bool) -> g.Expr:
    ct = a.content
    if ct.always_wrapped():
        body = ct.start + g.tag(g.until(ct.end)) + ct.end + g.nothing()
        if extracting:
            return reasoning + body
        return g.tag(g.until(ct.start)) + body
    return reasoning + g.tag(g.until()) + g.nothing()


def _tools(r: g.Rules, a: Analysis, request: ReplyRequest, reasoning: g.Expr) -> g.Expr:
    mode = a.tools.mode
    if mode == T_JSON:
        return _json_native(r, a, request, reasoning)
    if mode == T_TAG_JSON:
        return _tagged_calls(r, a, request, reasoning, _tag_json_choice(r, a.tools, request))
    if mode == T_TAG_TAGGED:
        return _tagged_calls(r, a, request, reasoning, _tag_tagged_choice(r, a.tools, request))
    return g.nothing()


# ---------------------------------------------------------------------------------- JSON


def _json_native(r: g.Rules, a: Analysis, request: ReplyRequest, reasoning: g.Expr) -> g.Expr:
    tl = a.tools
    name_key, args_key = tl.name_field, tl.args_field
    if tl.function_field and tl.function_field != "function" and "." not in name_key:
        name_key = f"{tl.function_field}.{name_key}"
        args_key = f"{tl.function_field}.{args_key}"
    layout = JsonLayout(
        name_key=name_key,
        args_key=args_key,
        array_wrapped=tl.tools_array_wrapped,
        function_is_key=tl.fun_name_is_key,
        call_id_key=tl.id_field,
        gen_call_id_key=tl.gen_id_field,
        parameters_order=tuple(tl.parameter_order),
        openai_wrapper=tl.openai_wrapper,
    )
    tools = request.tools
    parallel = request.parallel_tool_calls
    force = request.tool_choice == "required"
    if not tl.section_start and tl.per_call_start:
        section = (tl.per_call_start, tl.per_call_end)
        one = standard_json_tools(r, section, tools, parallel, force, layout)
        # under the guaranteed policy, one call unless parallel (llama.cpp: any number)
        least, most = (1, 1) if calls_only(request) and not parallel else (1, -1)
        calls = r.trigger_rule("tool-calls", g.repeat(one + g.space(), least, most))
    else:
        section = (tl.section_start, tl.section_end)
        calls = standard_json_tools(r, section, tools, parallel, force, layout)
    ct = a.content
    if ct.always_wrapped():
        wrapped = g.optional(ct.start + g.tag(g.until(ct.end)) + ct.end)
        return reasoning + before_calls(request, wrapped) + calls + g.nothing()
    start = tl.section_start or tl.per_call_start or "{"
    before = g.optional(g.tag(g.until(start)))
    return reasoning + before_calls(request, before) + calls + g.nothing()


# ---------------------------------------------------------------------------------- tagged


def _function(
    tl: Tools,
    name: str,
    call_id: g.Expr | None,
    args: g.Expr,
    peek: bool,
) -> g.Expr:
    """One call: the name's opener, the call id, the arguments, the close (llama.cpp's
    build_func_parser; ``call_id`` None: the format has none)."""
    lead = g.nothing()
    if tl.id_before_name:  # the guaranteed policy's id before the name (Tools.id_before_name)
        lead = tl.id_prefix + g.tag(g.until(tl.id_suffix)) + tl.id_suffix
    opener = g.tag(lead + tl.name_prefix + g.tag(g.lit(name)) + tl.name_suffix)
    if tl.args_separator:
        opener = opener + g.space() + g.lit(tl.args_separator)
    ident = call_id if call_id is not None else g.nothing()
    whole = False
    if tl.name_suffix:
        func = opener + ident + g.space() + args
    elif call_id is not None:
        func = g.tag(opener + ident) + g.space() + args
    elif peek:
        func = g.tag(opener + ident + g.space() + g.nothing()) + args
    else:
        func = opener + ident + g.space() + args
        whole = True
    if tl.close:
        func = func + g.space() + g.tag(g.lit(tl.close))
    elif tl.per_call_end:
        func = func + g.tag(g.nothing())
    else:
        func = func + g.tag(g.space())
    return g.tag(func) if whole else func


def _has_call_id(tl: Tools) -> bool:
    return tl.id_pos == ID_BETWEEN and bool(tl.id_prefix) and bool(tl.id_suffix or tl.args_start)


def _functions(request: ReplyRequest) -> list[Mapping[str, Any]]:
    return [
        t["function"] for t in request.tools or () if isinstance(t, Mapping) and "function" in t
    ]


def _tag_json_choice(r: g.Rules, tl: Tools, request: ReplyRequest) -> g.Expr:
    """Each tool's call with JSON arguments, as a rule ``tool-NAME``."""
    choice = g.choice()
    for fn in _functions(request):
        name = fn["name"]
        call_id: g.Expr | None = None
        if _has_call_id(tl):
            if tl.id_suffix:
                ident = g.tag(g.until(tl.id_suffix))
                call_id = g.optional(tl.id_prefix + ident) + tl.id_suffix
            else:
                call_id = g.optional(tl.id_prefix + g.tag(g.until(tl.args_start)))
        args = g.tag(g.schema(r.json(), f"tool-{name}-schema", tool_schema(fn)))
        if tl.args_start:
            args = tl.args_start + args
        if tl.args_end:
            args = args + tl.args_end
        func = _function(tl, name, call_id, args, bool(tl.args_start))
        choice = choice | r.rule(f"tool-{name}", func)
    return choice


def _tagged_args(r: g.Rules, tl: Tools, name: str, fn: Mapping[str, Any]) -> tuple[g.Expr, bool]:
    """A tool's tagged arguments (required ones in order, then optional ones in any order) and
    whether any is required."""
    until_suffix = r.rule("until-suffix", g.until(tl.arg_value_suffix))
    required: list[g.Expr] = []
    optional: list[g.Expr] = []
    for param in tool_parameters(fn):
        opener = g.tag(tl.arg_name_prefix + g.tag(g.lit(param.name)) + tl.arg_name_suffix)
        close = g.tag(g.lit(tl.arg_value_suffix))
        if g.may_be_string(param.schema):
            value = g.up_to_over(g.tag(until_suffix) + close, tl.arg_value_suffix)
        else:
            schema_name = f"tool-{name}-arg-{param.name}-schema"
            value = g.tag(g.schema(r.json(), schema_name, param.schema)) + close
        arg = g.tag(opener + tl.arg_value_prefix + value)
        rule = r.rule(f"tool-{name}-arg-{param.name}", arg)
        (required if param.required else optional).append(rule)
    args = spaced_arguments(required, optional)
    if tl.args_start:
        args = tl.args_start + args
    if tl.args_end:
        args = args + tl.args_end
    return args, bool(required)


def _tag_tagged_choice(r: g.Rules, tl: Tools, request: ReplyRequest) -> g.Expr:
    """Each tool's call with tagged arguments, as a rule ``tool-NAME``."""
    choice = g.choice()
    for fn in _functions(request):
        name = fn["name"]
        args, any_required = _tagged_args(r, tl, name, fn)
        call_id: g.Expr | None = None
        if _has_call_id(tl):
            if tl.id_suffix:
                call_id = g.optional(tl.id_prefix + g.tag(g.until(tl.id_suffix)) + tl.id_suffix)
            else:
                call_id = g.optional(tl.id_prefix + g.tag(g.until(tl.args_start)))
        peek = bool(tl.arg_name_prefix) and any_required
        choice = choice | r.rule(f"tool-{name}", _function(tl, name, call_id, args, peek))
    return choice


def _tagged_calls(
    r: g.Rules, a: Analysis, request: ReplyRequest, reasoning: g.Expr, choice: g.Expr
) -> g.Expr:
    """The calls of a tagged format: each in per-call markers (in a section when there is
    one), or all in one section separated by ``, ``."""
    tl = a.tools
    tagged = tl.mode == T_TAG_TAGGED
    ws = g.space() if tagged else g.nothing()
    parallel = request.parallel_tool_calls
    if tl.per_call_start:
        if tagged:
            # llama.cpp's parse wants the per-call end right after a call's arguments unless
            # the format tolerates whitespace there; its grammar allows space: a required
            # call under the guaranteed policy writes only what the parse reads
            strict = calls_only(request) and not tl.tolerate_intertag_whitespace
            gap = g.nothing() if strict else g.space()
            wrapped = tl.per_call_start + g.space() + choice + gap + tl.per_call_end
        else:
            wrapped = tl.per_call_start + choice + tl.per_call_end
        body = wrapped + g.zero_or_more(g.space() + wrapped) if parallel else wrapped
        calls = r.trigger_rule("tool-call", body + ws if tagged else body)
        if tl.section_start:
            tail = g.lit(tl.section_end) + ws if tl.section_end else g.nothing()
            body = tl.section_start + g.space() + calls + g.space() + tail
            calls = r.trigger_rule("tool-calls", body)
    else:
        head = tl.section_start + g.space() if tagged else g.lit(tl.section_start)
        body = head + choice
        if parallel:
            between = ", " if tl.call_separator is None else tl.call_separator
            body = body + g.zero_or_more(between + choice if between else choice)
        calls = r.trigger_rule("tool-call", body + ws + tl.section_end)
    if request.tool_choice != "required":
        calls = g.optional(calls)
    trigger = tl.section_start or tl.per_call_start
    before = g.until(trigger) if trigger else g.nothing()
    return reasoning + before_calls(request, g.optional(g.tag(before))) + calls + g.nothing()
