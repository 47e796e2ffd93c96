"""An analysis + request options -> the reply format llama.cpp's auto parser generator builds.

The grammar is ``prefix(generation_prompt, reasoning start) [ws] reasoning? content? calls? EOF``;
the calls are compiled to PEG parsers, one unit at a time where the grammar repeats a unit
(per-call markers), the whole section otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import mapper as t
from .. import peg
from ..arguments import arg_name, tool_functions, tool_name, tool_names
from ..constraint import Constraint, constraint, words
from ..description import (
    Calls,
    CallSection,
    Content,
    ContentValue,
    End,
    Expect,
    Marker,
    ReasoningBlock,
    ReplyFormat,
    Step,
    Text,
    Thought,
    Whitespace,
    steps,
)
from ..response_format import fenced_json, json_content
from ..schema import parameters, value_types
from .analysis import ID_BETWEEN, R_NONE, T_JSON, T_NONE, T_TAG_JSON, Analysis, Tools
from .diff import trim

__all__ = ["HANDLER", "build_format", "constraint_for", "json_call"]

HANDLER = "auto"
_SPACE = " \t\n\v\f\r"


class _End(peg.Parser):
    """End of input (llama.cpp's ``end()``)."""

    def parse(self, text: str, pos: int) -> peg.Result:
        return peg.Result(peg.SUCCESS if pos >= len(text) else peg.FAIL, pos)


def _lit(s: str) -> peg.Parser:
    return peg.Literal(s) if s else peg.Eps()


def _seq(*parts: peg.Parser) -> peg.Parser:
    kept = [p for p in parts if not isinstance(p, peg.Eps)]
    if not kept:
        return peg.Eps()
    return kept[0] if len(kept) == 1 else peg.Seq(*kept)


def _split_space(tag: str) -> tuple[str, str, str]:
    """optspace: (leading whitespace, core, trailing whitespace)."""
    core = tag.strip(_SPACE)
    if not core:
        return tag, "", ""
    lead = tag[: len(tag) - len(tag.lstrip(_SPACE))]
    trail = tag[len(tag.rstrip(_SPACE)) :]
    return lead, core, trail


def _prefix(generation_prompt: str, delimiter: str) -> str:
    if not generation_prompt or not delimiter:
        return generation_prompt
    at = generation_prompt.find(delimiter)
    return generation_prompt if at < 0 else generation_prompt[:at]


# ---------------------------------------------------------------------------------- JSON


def _id_value() -> peg.Parser:
    return peg.Choice(
        peg.Seq(peg.Literal('"'), peg.atomic_tag(t.TOOL_ID, peg.StringBody('"')), peg.Literal('"')),
        peg.atomic_tag(t.TOOL_ID, peg.json_number),
    )


def _key(name: str) -> peg.Parser:
    return peg.Seq(peg.Literal(f'"{name}"'), peg.Space(), peg.Literal(":"), peg.Space())


def _quoted_name(name: str) -> peg.Parser:
    return peg.Atomic(peg.Seq(peg.Literal('"'), tool_name(name), peg.Literal('"')))


def _id_member(key: str) -> peg.Parser:
    """``"key": id`` with the id a string or a number."""
    return peg.Atomic(peg.Seq(_key(key), _id_value()))


def _string_id_member(key: str) -> peg.Parser:
    """``"key": "id"``."""
    return peg.Atomic(
        peg.Seq(
            _key(key),
            peg.Literal('"'),
            peg.atomic_tag(t.TOOL_ID, peg.StringBody('"')),
            peg.Literal('"'),
        )
    )


def _comma() -> peg.Parser:
    return peg.Seq(peg.Space(), peg.Literal(","), peg.Space())


def _comma_or_semicolon() -> peg.Parser:
    """Between bare JSON calls under the guaranteed policy: llama.cpp's comma, or the `; `
    that Llama 3.x writes between calls (vLLM's llama3_json parser splits on it)."""
    return peg.Seq(peg.Space(), peg.Choice(peg.Literal(","), peg.Literal(";")), peg.Space())


def _between_calls(tl: Tools, llama: peg.Parser) -> peg.Parser:
    """What parts two calls of a section: llama.cpp's separator, and the template's own where
    the written calls found one (the guaranteed policy)."""
    if tl.call_separator is None:
        return llama
    own = _seq(peg.Space(), _lit(tl.call_separator.strip()), peg.Space())
    return peg.Choice(llama, own)


def _json_flat(tl: Tools, name: str, name_key: str, args_key: str) -> peg.Parser:
    name_p = peg.Seq(_key(name_key), _quoted_name(name))
    args_p = peg.Seq(_key(args_key), peg.Tag(t.TOOL_ARGS, peg.json_value))
    pairs: list[tuple[peg.Parser, str]] = [(name_p, name_key), (args_p, args_key)]
    if tl.id_field:
        pairs.append((peg.optional(_id_member(tl.id_field)), tl.id_field))
    if tl.gen_id_field:
        pairs.append((peg.optional(_id_member(tl.gen_id_field)), tl.gen_id_field))
    order = tl.parameter_order

    def rank(key: str) -> int:
        return order.index(key) if key in order else len(order)

    pairs.sort(key=lambda pair: rank(pair[1]))
    parts: list[peg.Parser] = [peg.atomic_tag(t.TOOL_OPEN, peg.Literal("{")), peg.Space()]
    if tl.openai_wrapper:
        parts.append(
            peg.optional(
                peg.Seq(
                    _key("type"),
                    peg.Literal('"function"'),
                    peg.Space(),
                    peg.Literal(","),
                    peg.Space(),
                )
            )
        )
    for i, (p, _) in enumerate(pairs):
        parts.append(p)
        if tl.history_id_field:  # wherever the template writes it: after any member
            parts.append(peg.optional(peg.Seq(_comma(), _string_id_member(tl.history_id_field))))
        if i < len(pairs) - 1:
            parts.append(_comma())
    parts += [peg.Space(), peg.atomic_tag(t.TOOL_CLOSE, peg.Literal("}"))]
    return peg.Tag(t.TOOL, peg.Seq(*parts))


def json_call(tl: Tools, name: str) -> peg.Parser:
    """One call of the tool ``name`` as the JSON object the analysis ``tl`` describes (flat
    keys: ``{"name": ..., "arguments": ...}`` and the ids the template writes)."""
    return _json_flat(tl, name, tl.name_field or "name", tl.args_field or "arguments")


def _json_nested(tl: Tools, name: str, name_key: str, args_key: str) -> peg.Parser:
    name_pre, _, name_rest = name_key.partition(".")
    args_pre, _, args_rest = args_key.partition(".")
    nested_prefix = name_pre if name_rest else args_pre
    nested_name = name_rest if name_rest else name_key
    nested_args = args_rest if args_rest else args_key
    inner = peg.Seq(
        peg.Literal("{"),
        peg.Space(),
        _key(nested_name),
        _quoted_name(name),
        _comma(),
        _key(nested_args),
        peg.Tag(t.TOOL_ARGS, peg.json_value),
        peg.Space(),
        peg.Literal("}"),
    )
    parts: list[peg.Parser] = [peg.atomic_tag(t.TOOL_OPEN, peg.Literal("{")), peg.Space()]
    if tl.id_field and "." not in tl.id_field:
        parts.append(peg.optional(peg.Seq(_string_id_member(tl.id_field), _comma())))
    if tl.gen_id_field and "." not in tl.gen_id_field:
        parts.append(peg.optional(peg.Seq(_id_member(tl.gen_id_field), _comma())))
    parts += [
        _key(nested_prefix),
        inner,
        peg.Space(),
        peg.atomic_tag(t.TOOL_CLOSE, peg.Literal("}")),
    ]
    return peg.Tag(t.TOOL, peg.Seq(*parts))


def _json_name_is_key(tl: Tools, name: str) -> peg.Parser:
    fields: list[peg.Parser] = []
    optional_comma = peg.optional(peg.Seq(peg.Literal(","), peg.Space()))
    if tl.id_field:
        fields.append(
            peg.optional(peg.Seq(_string_id_member(tl.id_field), peg.Space(), optional_comma))
        )
    if tl.gen_id_field:
        fields.append(
            peg.optional(peg.Seq(_id_member(tl.gen_id_field), peg.Space(), optional_comma))
        )
    args_key = tl.args_field
    if not args_key:
        args: peg.Parser = peg.Tag(t.TOOL_ARGS, peg.json_value)
    else:
        args = peg.Seq(_key(args_key), peg.Tag(t.TOOL_ARGS, peg.json_value))
    fields.append(args)
    if not args_key and len(fields) == 1:
        inner: peg.Parser = fields[0]
    else:
        parts: list[peg.Parser] = [peg.Literal("{"), peg.Space()]
        for i, f in enumerate(fields):
            parts.append(f)
            if i < len(fields) - 1:
                parts.append(peg.Space())
        parts += [peg.Space(), peg.Literal("}")]
        inner = peg.Seq(*parts)
    return peg.Tag(
        t.TOOL,
        peg.Seq(
            peg.atomic_tag(t.TOOL_OPEN, peg.Literal("{")),
            peg.Space(),
            peg.Literal('"'),
            tool_name(name),
            peg.Literal('"'),
            peg.Space(),
            peg.Literal(":"),
            peg.Space(),
            inner,
            peg.Space(),
            peg.atomic_tag(t.TOOL_CLOSE, peg.Literal("}")),
        ),
    )


def _json_section(
    tl: Tools,
    functions: Sequence[Mapping[str, Any]],
    start: str,
    end: str,
    parallel: bool,
    semicolons: bool = False,
) -> peg.Parser:
    """standard_json_tools without its outer optional: ``start ws calls ws end``; with
    ``semicolons``, bare calls (no markers around them) may be parted by `;` too."""
    name_key = tl.name_field or "name"
    args_key = tl.args_field or "arguments"
    if tl.function_field and tl.function_field != "function" and "." not in name_key:
        name_key = f"{tl.function_field}.{name_key}"
        args_key = f"{tl.function_field}.{args_key}"
    alternatives: list[peg.Parser] = []
    for fn in functions:
        name = str(fn["name"])
        if tl.fun_name_is_key:
            alternatives.append(_json_name_is_key(tl, name))
        elif "." in name_key or "." in args_key:
            alternatives.append(_json_nested(tl, name, name_key, args_key))
        else:
            alternatives.append(_json_flat(tl, name, name_key, args_key))
    choice = peg.Choice(*alternatives)
    calls: peg.Parser = choice
    if parallel:
        bare = semicolons and not (start or end or tl.tools_array_wrapped)
        parting = _between_calls(tl, _comma_or_semicolon() if bare else _comma())
        calls = peg.Seq(choice, peg.Repeat(peg.Seq(parting, choice)))
    if tl.tools_array_wrapped:
        calls = peg.Seq(peg.Literal("["), peg.Space(), calls, peg.Space(), peg.Literal("]"))
    return _seq(_lit(start), peg.Space(), calls, peg.Space(), _lit(end))


# ---------------------------------------------------------------------------------- tagged


def _func(
    tl: Tools,
    name: str,
    call_id: peg.Parser,
    have_call_id: bool,
    args: peg.Parser,
    atomic_peek: peg.Parser | None,
) -> peg.Parser:
    lead: peg.Parser = peg.Eps()
    if tl.id_before_name:  # the guaranteed policy's id before the name (Tools.id_before_name)
        ident = peg.atomic_tag(t.TOOL_ID, peg.Until(tl.id_suffix))
        lead = _seq(_lit(tl.id_prefix), ident, peg.Literal(tl.id_suffix))
    opener: peg.Parser = peg.atomic_tag(
        t.TOOL_OPEN,
        _seq(
            lead,
            _lit(tl.name_prefix),
            tool_name(name),
            _lit(tl.name_suffix),
        ),
    )
    if tl.args_separator:
        opener = peg.Seq(opener, peg.Space(), peg.Literal(tl.args_separator))
    matched_atomic = True
    if tl.name_suffix:
        func: peg.Parser = _seq(opener, call_id, peg.Space(), args)
    elif have_call_id:
        func = _seq(peg.Atomic(_seq(opener, call_id)), peg.Space(), args)
    elif atomic_peek is not None:
        func = _seq(peg.Atomic(_seq(opener, call_id, peg.Space(), atomic_peek)), args)
    else:
        func = _seq(opener, call_id, peg.Space(), args)
        matched_atomic = False
    if tl.close:
        func = peg.Seq(func, peg.Space(), peg.atomic_tag(t.TOOL_CLOSE, peg.Literal(tl.close)))
    elif tl.per_call_end:
        look: peg.Parser = peg.Literal(tl.per_call_end)
        if tl.tolerate_intertag_whitespace:
            look = peg.Seq(peg.Space(), look)
        func = peg.Seq(func, peg.atomic_tag(t.TOOL_CLOSE, peg.Peek(look)))
    else:
        func = peg.Seq(func, peg.atomic_tag(t.TOOL_CLOSE, peg.Space()))
    return func if matched_atomic else peg.Atomic(func)


def _call_id_section(tl: Tools, tagged: bool) -> tuple[peg.Parser, bool]:
    if tl.id_pos != ID_BETWEEN or not tl.id_prefix or not (tl.id_suffix or tl.args_start):
        return peg.Eps(), False
    if tl.id_suffix:
        ident = peg.atomic_tag(t.TOOL_ID, peg.Until(tl.id_suffix))
        if tagged:
            return peg.optional(
                _seq(peg.Literal(tl.id_prefix), ident, peg.Literal(tl.id_suffix))
            ), True
        return _seq(
            peg.optional(_seq(peg.Literal(tl.id_prefix), ident)), peg.Literal(tl.id_suffix)
        ), True
    ident = peg.atomic_tag(t.TOOL_ID, peg.Until(tl.args_start))
    return peg.optional(_seq(peg.Literal(tl.id_prefix), ident)), True


def _tag_json_choice(tl: Tools, functions: Sequence[Mapping[str, Any]]) -> peg.Parser:
    alternatives: list[peg.Parser] = []
    for fn in functions:
        call_id, have_id = _call_id_section(tl, tagged=False)
        args: peg.Parser = peg.Tag(t.TOOL_ARGS, peg.json_value)
        args = _seq(_lit(tl.args_start), args, _lit(tl.args_end))
        peek = peg.Peek(peg.Literal(tl.args_start)) if tl.args_start else None
        alternatives.append(_func(tl, str(fn["name"]), call_id, have_id, args, peek))
    return peg.Choice(*alternatives)


def _tag_tagged_choice(tl: Tools, functions: Sequence[Mapping[str, Any]]) -> peg.Parser:
    until_suffix = peg.Until(tl.arg_value_suffix) if tl.arg_value_suffix else peg.Until()
    close = peg.atomic_tag(t.TOOL_ARG_CLOSE, _lit(tl.arg_value_suffix))
    alternatives: list[peg.Parser] = []
    for fn in functions:
        required: list[peg.Parser] = []
        optional: list[peg.Parser] = []
        for pname, schema, is_required, root in parameters(fn):
            opener = peg.atomic_tag(
                t.TOOL_ARG_OPEN,
                _seq(
                    _lit(tl.arg_name_prefix),
                    arg_name(pname),
                    _lit(tl.arg_name_suffix),
                ),
            )
            if "string" in value_types(schema, root):
                value: peg.Parser = peg.Seq(peg.Tag(t.TOOL_ARG_STRING_VALUE, until_suffix), close)
            else:
                value = peg.Seq(peg.Tag(t.TOOL_ARG_VALUE, peg.json_value), close)
            arg = peg.Tag(t.TOOL_ARG, _seq(opener, _lit(tl.arg_value_prefix), value))
            (required if is_required else optional).append(arg)
        parts: list[peg.Parser] = []
        for i, p in enumerate(required):
            if i > 0:
                parts.append(peg.Space())
            parts.append(p)
        if optional:
            parts.append(peg.Repeat(peg.Seq(peg.Space(), peg.Choice(*optional))))
        args = _seq(_lit(tl.args_start), *parts, _lit(tl.args_end))
        call_id, have_id = _call_id_section(tl, tagged=True)
        peek = (
            peg.Peek(peg.Literal(tl.arg_name_prefix)) if tl.arg_name_prefix and required else None
        )
        alternatives.append(_func(tl, str(fn["name"]), call_id, have_id, args, peek))
    return peg.Choice(*alternatives)


@dataclass(frozen=True)
class _OfferedCalls:
    """What every call syntax's section shares: settled calls to the offered tools."""

    tool_names: frozenset[str]
    required: bool

    def section(
        self,
        first: peg.Parser,
        next: peg.Parser | None,
        commit: str,
        openers: tuple[str, ...],
        space_after: bool = False,
        fail_at_parse_end: bool = True,
    ) -> CallSection:
        return CallSection(
            first=first,
            next=next,
            required=self.required,
            commit=commit,
            openers=openers,
            tool_names=self.tool_names,
            space_after=space_after,
            settle=True,
            fail_at_parse_end=fail_at_parse_end,
        )


def _calls(
    a: Analysis,
    functions: Sequence[Mapping[str, Any]],
    parallel: bool,
    required: bool,
    semicolons: bool = False,
) -> tuple[CallSection, str]:
    """The call section and the marker that ends the content before it."""
    tl = a.tools
    offered = _OfferedCalls(tool_names(functions), required)
    if tl.mode == T_JSON:
        trigger = tl.section_start or tl.per_call_start or "{"
        return _json_calls(tl, functions, parallel, offered, semicolons), trigger
    tagged = tl.mode != T_TAG_JSON
    choice = _tag_tagged_choice(tl, functions) if tagged else _tag_json_choice(tl, functions)
    trigger = tl.section_start or tl.per_call_start
    if tl.per_call_start:
        return _per_call_calls(tl, choice, tagged, parallel, offered), trigger
    return _section_calls(tl, choice, tagged, parallel, offered), trigger


def _json_calls(
    tl: Tools,
    functions: Sequence[Mapping[str, Any]],
    parallel: bool,
    offered: _OfferedCalls,
    semicolons: bool = False,
) -> CallSection:
    """JSON calls: each in its own per-call markers, or all in one section."""
    if not tl.section_start and tl.per_call_start:
        unit = _json_section(tl, functions, tl.per_call_start, tl.per_call_end, parallel)
        return offered.section(
            unit,
            unit,
            tl.per_call_end,
            (tl.per_call_start,),
            space_after=True,
            fail_at_parse_end=False,
        )
    unit = _json_section(tl, functions, tl.section_start, tl.section_end, parallel, semicolons)
    # under the guaranteed policy, the space a template writes after the section (Apriel's
    # newline before <|end|>) is read with it, not left as text after the reply
    openers = (tl.section_start,) if tl.section_start else ()
    return offered.section(unit, None, tl.section_end, openers, space_after=semicolons)


def _per_call_calls(
    tl: Tools, choice: peg.Parser, tagged: bool, parallel: bool, offered: _OfferedCalls
) -> CallSection:
    """Tagged calls each wrapped in per-call markers (inside section markers when there are)."""
    if tagged:
        wrapped: peg.Parser = _seq(
            peg.Literal(tl.per_call_start),
            peg.Space(),
            choice,
            peg.Space(),
            _lit(tl.per_call_end),
        )
    else:
        wrapped = _seq(peg.Literal(tl.per_call_start), choice, _lit(tl.per_call_end))
    if tl.section_start:
        return _wrapped_in_section(tl, wrapped, tagged, parallel, offered)
    if tagged:
        return offered.section(
            wrapped,
            wrapped if parallel else None,
            tl.per_call_end or tl.close,
            (tl.per_call_start,),
            space_after=True,
        )
    return offered.section(
        wrapped,
        peg.Seq(peg.Space(), wrapped) if parallel else None,
        tl.per_call_end or tl.close,
        (tl.per_call_start,),
    )


def _wrapped_in_section(
    tl: Tools, wrapped: peg.Parser, tagged: bool, parallel: bool, offered: _OfferedCalls
) -> CallSection:
    """``section_start ws wrapped (ws wrapped)* ws section_end`` read as one unit."""
    repeated: peg.Parser
    if parallel:
        repeated = peg.Seq(wrapped, peg.Repeat(peg.Seq(peg.Space(), wrapped)))
    else:
        repeated = wrapped
    inner: peg.Parser = peg.Seq(repeated, peg.Space()) if tagged else repeated
    if tl.section_end:
        tail: peg.Parser = peg.Literal(tl.section_end)
        if tagged:
            tail = peg.Seq(tail, peg.Space())
    else:
        tail = _End()
    unit = peg.Seq(peg.Literal(tl.section_start), peg.Space(), inner, peg.Space(), tail)
    return offered.section(unit, None, tl.section_end, (tl.section_start,))


def _section_calls(
    tl: Tools, choice: peg.Parser, tagged: bool, parallel: bool, offered: _OfferedCalls
) -> CallSection:
    """Tagged calls with no per-call markers: the whole section is one unit."""
    more: list[peg.Parser] = []
    if parallel:
        more.append(peg.Repeat(peg.Seq(_between_calls(tl, peg.Literal(", ")), choice)))
    if tagged:
        unit = _seq(
            _lit(tl.section_start), peg.Space(), choice, *more, peg.Space(), _lit(tl.section_end)
        )
    else:
        unit = _seq(_lit(tl.section_start), choice, *more, _lit(tl.section_end))
    return offered.section(
        unit,
        None,
        tl.section_end or tl.close,
        (tl.section_start,) if tl.section_start else (),
    )


# ---------------------------------------------------------------------------------- format


def build_format(
    a: Analysis,
    generation_prompt: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str,
    parallel_tool_calls: bool,
    reasoning_format: str,
    json_schema: Mapping[str, Any] | None = None,
    semicolons: bool = False,
) -> ReplyFormat:
    """``semicolons``: bare JSON calls may be parted by `;` (the guaranteed policy)."""
    rs = a.reasoning
    extracting = reasoning_format != "none" and rs.mode != R_NONE
    reasoning = _reasoning_block(a) if extracting and rs.end else None
    prefix = _prefix(generation_prompt, trim(rs.start))
    if json_schema:
        return _response_format(a, prefix, reasoning)
    functions = tool_functions(tools)
    if functions and tool_choice != "none" and a.supports_tool_calls:
        required = tool_choice == "required"
        return _tool_call_format(
            a, prefix, reasoning, functions, parallel_tool_calls, required, semicolons
        )
    return _content_format(a, prefix, reasoning, extracting)


def _reasoning_block(a: Analysis) -> ReasoningBlock:
    """The reasoning between its start and end markers, their spaces optional."""
    rs = a.reasoning
    _, start_core, start_trail = _split_space(rs.start)
    start_lead = _split_space(rs.start)[0] if not start_core else ""
    end_core = trim(rs.end)
    end_trail = _split_space(rs.end)[2]
    return ReasoningBlock(
        start=start_core,
        stops=(end_core,),
        closers=((end_core, True),),
        space_after_start=False,
        start_optional=start_lead + start_trail,
        end_optional=end_trail,
    )


def _response_format(a: Analysis, prefix: str, reasoning: ReasoningBlock | None) -> ReplyFormat:
    """A response format wins over tools: one JSON value, fenced in ```json ... ``` or bare."""
    ws = peg.Space()
    value = json_content()
    return ReplyFormat(
        HANDLER,
        steps(
            Expect(prefix),
            Whitespace(),
            Thought(reasoning) if reasoning else None,
            Whitespace(),
            ContentValue(peg.Choice(fenced_json(), peg.Seq(ws, value, ws))),
            End(),
        ),
        stop=tuple(a.additional_stops),
    )


def _tool_call_format(
    a: Analysis,
    prefix: str,
    reasoning: ReasoningBlock | None,
    functions: Sequence[Mapping[str, Any]],
    parallel: bool,
    required: bool,
    semicolons: bool = False,
) -> ReplyFormat:
    """Content up to the calls' trigger, then the calls."""
    stops = tuple(a.additional_stops)
    if a.tools.mode == T_NONE:
        # llama.cpp's generator gives an empty parser: nothing after the prefix is read
        return ReplyFormat(
            HANDLER,
            steps(Expect(prefix), Whitespace(), Thought(reasoning) if reasoning else None),
            stop=stops,
        )
    section, trigger = _calls(a, functions, parallel, required, semicolons)
    ct = a.content
    if a.tools.mode == T_JSON and ct.always_wrapped():
        # JSON calls after an optional wrapped content block: R (CS content CE)? calls EOF;
        # content outside the wrapper is not read
        return ReplyFormat(
            HANDLER,
            steps(
                Expect(prefix),
                Whitespace(),
                Thought(reasoning) if reasoning else None,
                Content((ct.end,), open=ct.start, close=ct.end, optional=True),
                Calls(section),
                End(),
            ),
            stop=stops,
        )
    return ReplyFormat(
        HANDLER,
        steps(
            Expect(prefix),
            Whitespace(),
            Thought(reasoning) if reasoning else None,
            Content((trigger,)) if trigger else None,
            Calls(section),
            End(),
        ),
        stop=stops,
    )


def _content_format(
    a: Analysis, prefix: str, reasoning: ReasoningBlock | None, extracting: bool
) -> ReplyFormat:
    """No calls: reasoning (when read) and content, framed when the template always wraps it."""
    stops = tuple(a.additional_stops)
    pure = a.reasoning.mode == R_NONE
    ct = a.content
    if ct.always_wrapped():
        # the content must be framed: R CS content CE, or (no thought read) the text before CS
        # is content too and CS itself is dropped
        lead: tuple[Step, ...] = () if extracting else (Text((ct.start,)), Marker(ct.start))
        return ReplyFormat(
            HANDLER,
            steps(
                Expect(prefix),
                None if pure else Whitespace(),
                Thought(reasoning) if reasoning else None,
                *lead,
                Content((ct.end,), open=ct.start if extracting else "", close=ct.end),
                End(),
            ),
            stop=stops,
        )
    return ReplyFormat(
        HANDLER,
        steps(
            Expect(prefix),
            None if pure else Whitespace(),
            Thought(reasoning) if reasoning else None,
            Content(None),
            End(),
        ),
        stop=stops,
    )


# ---------------------------------------------------------------------------------- constraint

# the lazy grammar also wakes where a template's model writes the OpenAI call wrapper
OPENAI_WRAPPER_TRIGGER = '{"type": "function",'


def constraint_for(
    a: Analysis,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: str,
    json_schema: Mapping[str, Any] | None = None,
) -> Constraint:
    """llama.cpp's grammar setup for an analysed template and a request (everything but the
    grammar's text): a response format gets an eager grammar; offered tools a lazy one under
    ``auto`` (only when the calls have a start marker to wake it) and an eager one under
    ``required``; the analysis gives the preserved tokens and the additional stops."""
    rf = bool(json_schema)
    has_tools = a.tools.mode != T_NONE and bool(tool_functions(tools))
    marker = a.tools.section_start or a.tools.per_call_start
    grammar = rf or (
        has_tools and ((tool_choice == "auto" and bool(marker)) or tool_choice == "required")
    )
    lazy = not rf and tool_choice == "auto"
    triggers = words(marker) + (words(OPENAI_WRAPPER_TRIGGER) if a.tools.openai_wrapper else ())
    return constraint(
        a.preserved_tokens,
        grammar=grammar,
        lazy=lazy,
        triggers=triggers if lazy else (),
        additional_stops=a.additional_stops,
    )
