"""Template analysis by differential rendering (llama.cpp's diff analyzer, ported in behaviour).

The template is rendered on small probe conversations that differ in one thing (reasoning or
not, a call or not, one argument or another, ...); the renders are split into their common
prefix and suffix around the difference, and the markers around the probe values are read off
with small strict patterns. The result is an :class:`Analysis`: plain strings and modes that
:mod:`.build` turns into a reply format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...template.capabilities import ProbeRenderer, ToolCallSupport, tool_call_support
from ...template.render import ChatTemplate
from . import strict as s
from .diff import (
    MARKER,
    Split,
    common_prefix_length,
    diff_split,
    prune_whitespace,
    segmentize,
    trim,
    trim_leading,
    until_common_prefix,
)

__all__ = [
    "Analysis",
    "AnalysisFailed",
    "Reasoning",
    "Content",
    "Tools",
    "Probe",
    "Renderer",
    "analyze",
    "assistant_turn",
    "tool_probe",
]

FUN_FIRST = "FFF_FIRST_FUN_F"
FUN_SECOND = "SSS_SECOND_FUN_S"
ARG_FIRST = "AA_ARG_FST_AA"
ARG_SECOND = "BB_ARG_SND_BB"
USER_MSG = "U_USER_MSG Hello END_U"
USER_MSG_TWO = "V_USER_MSG Hello END_V"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
THINKING = "REASON_PART I am thinking END_R"
CALL_ID_001 = "call00001"
CALL_ID_002 = "call00002"
CALL_ID_999 = "call99999"

# reasoning modes, content modes, tool formats, call id positions
R_NONE, R_TAG, R_TOOLS_ONLY = "NONE", "TAG_BASED", "TOOLS_ONLY"
C_PLAIN, C_WRAPPED, C_WRAPPED_WITH_REASONING = "PLAIN", "ALWAYS_WRAPPED", "WRAPPED_WITH_REASONING"
T_NONE, T_JSON, T_TAG_JSON, T_TAG_TAGGED = "NONE", "JSON_NATIVE", "TAG_WITH_JSON", "TAG_WITH_TAGGED"
ID_NONE, ID_PRE, ID_BETWEEN, ID_POST = "NONE", "PRE_FUNC_NAME", "BETWEEN_FUNC_AND_ARGS", "POST_ARGS"


@dataclass
class Reasoning:
    mode: str = R_NONE
    start: str = ""
    end: str = ""


@dataclass
class Content:
    mode: str = C_PLAIN
    start: str = ""
    end: str = ""

    def always_wrapped(self) -> bool:
        return self.mode == C_WRAPPED and bool(self.start) and bool(self.end)


@dataclass
class Tools:
    mode: str = T_NONE
    section_start: str = ""
    section_end: str = ""
    per_call_start: str = ""
    per_call_end: str = ""
    fun_name_is_key: bool = False
    tools_array_wrapped: bool = False
    openai_wrapper: bool = False
    function_field: str = "function"
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str = ""
    gen_id_field: str = ""
    parameter_order: list[str] = field(default_factory=list)
    # function
    name_prefix: str = ""
    name_suffix: str = ""
    args_separator: str = ""
    close: str = ""
    # arguments
    args_start: str = ""
    args_end: str = ""
    arg_name_prefix: str = ""
    arg_name_suffix: str = ""
    arg_value_prefix: str = ""
    arg_value_suffix: str = ""
    arg_separator: str = ""
    tolerate_intertag_whitespace: bool = False
    # call id
    id_pos: str = ID_NONE
    id_prefix: str = ""
    id_suffix: str = ""
    # what the template writes between two calls of one section, where the written calls
    # (the guaranteed policy) found it; None: llama.cpp's (a comma)
    call_separator: str | None = None
    # the key of the call id the template writes in a call's JSON in history only, where the
    # written calls (the guaranteed policy) found it: read where present, never written
    history_id_field: str = ""
    # a call id the template writes before the call's name (id_prefix, the id, id_suffix, then
    # the name's markers; id_pos PRE_FUNC_NAME), where the written calls (the guaranteed
    # policy) found it: read and written; llama.cpp reads no id there
    id_before_name: bool = False


@dataclass
class Analysis:
    supports_tool_calls: bool = False
    supports_parallel_tool_calls: bool = False
    reasoning: Reasoning = field(default_factory=Reasoning)
    content: Content = field(default_factory=Content)
    tools: Tools = field(default_factory=Tools)
    user_start: str = ""
    assistant_start: str = ""
    preserved_tokens: list[str] = field(default_factory=list)
    additional_stops: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------- probes


def _params_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            ARG_FIRST: {"type": "string", "description": "First argument"},
            ARG_SECOND: {"type": "string", "description": "Second argument"},
        },
        "required": [],
    }


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": FUN_FIRST,
            "description": "Test function foo",
            "parameters": _params_schema(),
        },
    },
    {
        "type": "function",
        "function": {
            "name": FUN_SECOND,
            "description": "Test function bar",
            "parameters": _params_schema(),
        },
    },
]

USER = {"role": "user", "content": USER_MSG}


def _call(name: str, args: Mapping[str, Any], call_id: str = CALL_ID_001) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": dict(args)}}


FIRST_CALL = _call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"})
SECOND_CALL = _call(FUN_SECOND, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_002)
FIRST_CALL_ALT_ID = _call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_999)
FIRST_CALL_ONE_ARG = _call(FUN_FIRST, {ARG_FIRST: "XXXX"})
FIRST_CALL_ONE_ARG_OTHER_VAL = _call(FUN_FIRST, {ARG_FIRST: "YYYY"})
FIRST_CALL_OTHER_ARG = _call(FUN_FIRST, {ARG_SECOND: "YYYY"})


def assistant_turn(
    content: str | None, calls: Sequence[Any] = (), reasoning: str | None = None
) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


@dataclass(frozen=True)
class Probe:
    messages: tuple[Any, ...]
    tools: bool = False
    add_generation_prompt: bool = False
    enable_thinking: bool = True


@dataclass
class Compared:
    diff: Split
    a: str
    b: str


class Renderer:
    """Renders probes with the shared probe renderer (a failing render is None) and diffs them.

    With ``text_arguments`` the calls' arguments are given as JSON text, not as objects (for
    templates that write them as they are given; llama.cpp's probes are always objects)."""

    def __init__(self, template: ChatTemplate, text_arguments: bool = False) -> None:
        self.probes = ProbeRenderer(template)
        self.text_arguments = text_arguments

    def render(self, probe: Probe) -> str | None:
        messages = probe.messages
        if self.text_arguments:
            messages = tuple(_arguments_as_text(message) for message in messages)
        return self.probes.render(
            messages,
            tools=TOOLS if probe.tools else None,
            add_generation_prompt=probe.add_generation_prompt,
            enable_thinking=probe.enable_thinking,
        )

    def compare(self, a: Probe, b: Probe) -> Compared | None:
        out_a = self.render(a)
        out_b = self.render(b)
        if out_a is None or out_b is None:
            return None
        return Compared(diff_split(out_a, out_b), out_a, out_b)


def _arguments_as_text(message: Mapping[str, Any]) -> Mapping[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return message
    texts = []
    for call in calls:
        function = call["function"]
        texts.append(
            {**call, "function": {**function, "arguments": json.dumps(function["arguments"])}}
        )
    return {**message, "tool_calls": texts}


def _with(probe: Probe, messages: Sequence[Any]) -> Probe:
    return Probe(tuple(messages), probe.tools, probe.add_generation_prompt, probe.enable_thinking)


# ---------------------------------------------------------------------------------- phases


def _reasoning_presence(r: Renderer, rs: Reasoning) -> None:
    base = Probe((USER, assistant_turn(ASSISTANT_MSG)))
    cmp = r.compare(base, _with(base, [USER, assistant_turn(ASSISTANT_MSG, reasoning=THINKING)]))
    if cmp is None:
        return
    diff = cmp.diff
    if not diff.right or THINKING not in diff.right:
        return
    wrapped = s.seq(
        s.tag("pre", s.seq(s.marker(), s.space())),
        s.lit(THINKING),
        s.tag("post", s.seq(s.space(), s.marker(), s.space())),
        s.rest(),
    )
    delimiter = s.seq(
        s.lit(THINKING),
        s.space(),
        s.optional(s.seq(s.tag("post", s.seq(s.marker(), s.space())), s.rest())),
    )
    ok, tags = s.parse_anywhere(wrapped, cmp.b)
    if not ok:
        ok, tags = s.parse_anywhere(delimiter, cmp.b)
    if ok:
        pre, post = tags.get("pre", ""), tags.get("post", "")
        if pre and post:
            rs.mode, rs.start, rs.end = R_TAG, pre, post
        elif post:
            rs.mode, rs.end = R_TAG, post


def _thinking_enabled(r: Renderer, rs: Reasoning) -> None:
    off = Probe((USER,), add_generation_prompt=True, enable_thinking=False)
    on = Probe((USER,), add_generation_prompt=True, enable_thinking=True)
    cmp = r.compare(off, on)
    if cmp is None:
        return
    diff = cmp.diff
    left_t, right_t = trim(diff.left), trim(diff.right)
    if not left_t and diff.right:
        if right_t and cmp.b.endswith(right_t) and not rs.start:
            rs.start = diff.right
            rs.mode = R_TAG
    elif not right_t and diff.left:
        if left_t and cmp.a.endswith(left_t) and not rs.end:
            seg = prune_whitespace(segmentize(cmp.a))
            if len(seg) >= 2 and seg[-1].value == left_t and seg[-2].type == MARKER:
                rs.start = seg[-2].value
            rs.end = diff.left
            rs.mode = R_TAG
    elif left_t and right_t:
        anchor_len = 64
        for base, extended in ((cmp.b, cmp.a), (cmp.a, cmp.b)):
            n = min(len(base), anchor_len)
            anchor = base[len(base) - n :]
            pos = extended.rfind(anchor)
            if pos < 0 or pos + n >= len(extended):
                continue
            extra = trim(extended[pos + n :])
            if not extra:
                continue
            seg = prune_whitespace(segmentize(extra))
            if len(seg) == 2 and seg[0].type == MARKER and seg[1].type == MARKER:
                if not rs.start:
                    rs.start = seg[0].value
                if not rs.end:
                    rs.end = seg[1].value
                rs.mode = R_TAG
                break
    if rs.mode == R_NONE and not rs.start and rs.end:
        rs.mode = R_TAG


def _reasoning_scope(r: Renderer, rs: Reasoning) -> None:
    with_content = Probe((USER, assistant_turn(ASSISTANT_MSG, reasoning=THINKING)), tools=True)
    call = _call(FUN_FIRST, {ARG_FIRST: "VVVV", ARG_SECOND: "XXXX"})
    cmp = r.compare(
        with_content, _with(with_content, [USER, assistant_turn(None, [call], THINKING)])
    )
    if cmp is None:
        return
    if THINKING in cmp.a or THINKING not in cmp.b:
        return
    rs.mode = R_TOOLS_ONLY
    wrapped = s.seq(
        s.tag("pre", s.seq(s.marker(), s.space())),
        s.lit(THINKING),
        s.space(),
        s.tag("post", s.seq(s.marker(), s.space())),
    )
    ok, tags = s.parse_anywhere(wrapped, cmp.b)
    if ok:
        rs.start, rs.end = tags.get("pre", ""), tags.get("post", "")
        return
    delimiter = s.seq(
        s.lit(THINKING), s.space(), s.optional(s.tag("post", s.seq(s.marker(), s.space())))
    )
    ok, tags = s.parse_anywhere(delimiter, cmp.b)
    if ok:
        rs.end = tags.get("post", "")
    else:
        rs.mode = R_NONE


def _content(r: Renderer, rs: Reasoning) -> Content:
    ct = Content()
    base = Probe((USER, assistant_turn(ASSISTANT_MSG)), tools=True)
    with_tools = _with(base, [USER, assistant_turn("", [_call("test_func", {"arg1": "value1"})])])
    with_reasoning = _with(base, [USER, assistant_turn("", reasoning=THINKING)])
    cmp_tools = r.compare(base, with_tools)
    cmp_reasoning = r.compare(base, with_reasoning)
    if cmp_tools is None or cmp_reasoning is None:
        return ct
    d_tools, d_reasoning = cmp_tools.diff, cmp_reasoning.diff
    found_plain = False
    if trim(d_tools.left) == ASSISTANT_MSG:
        plain = s.seq(
            s.space(),
            s.lit(d_reasoning.left),
            s.space(),
            s.optional(s.marker()),
            s.space(),
            s.end(),
        )
        if s.parse(plain, d_reasoning.left)[0]:
            ct.mode = C_PLAIN
            found_plain = True
        elif rs.mode != R_NONE and rs.end:
            post = s.seq(s.lit(rs.end), s.space(), s.lit(ASSISTANT_MSG))
            if s.parse_anywhere(post, d_reasoning.left)[0]:
                ct.mode = C_PLAIN
                found_plain = True
    if not found_plain:
        rdiff = d_reasoning.left
        if rs.end and rs.end in rdiff:
            rdiff = rdiff[rdiff.find(rs.end) + len(rs.end) :]
        pure = rdiff if len(rdiff) > len(d_tools.left) else d_tools.left
        wrapped = s.seq(
            s.tag("pre", s.seq(s.marker(), s.space())),
            s.lit(ASSISTANT_MSG),
            s.space(),
            s.tag("post", s.seq(s.marker(), s.space())),
            s.rest(),
        )
        _, tags = s.parse_anywhere(wrapped, pure)
        ct.start, ct.end = tags.get("pre", ""), tags.get("post", "")
    if ct.start or ct.end:
        ct.mode = C_WRAPPED
    return ct


def tool_probe(*calls: Any) -> Probe:
    return Probe((USER, assistant_turn("", calls)), tools=True)


def _tools(r: Renderer, rs: Reasoning, parallel: bool) -> Tools:
    tl = Tools()
    base = Probe((USER, assistant_turn(ASSISTANT_MSG)), tools=True)
    cmp = r.compare(base, tool_probe(FIRST_CALL))
    if cmp is None or not cmp.diff.right:
        return tl
    _tool_call_format(r, tl, cmp.diff.right, rs, parallel)
    if tl.mode not in (T_NONE, T_JSON):
        if parallel:
            _per_call_markers(r, tl)
        _function_markers(r, tl)
        if tl.mode == T_TAG_TAGGED:
            _argument_name_markers(r, tl)
            _argument_value_markers(r, tl)
        _argument_separator(r, tl)
        # llama.cpp reads argument start/end markers for JSON-native formats only, which never
        # reach this branch: they stay empty for tagged formats
        _call_id_markers(r, tl)
    return tl


def _in_json(haystack: str, needle: str) -> bool:
    pattern = s.seq(
        s.choice(s.lit("{"), s.lit(":")),
        s.space(),
        s.tag("dq", s.seq(s.lit('"'), s.lit(needle), s.lit('"'))),
    )
    return s.parse_anywhere(pattern, haystack)[0]


def _tool_call_format(r: Renderer, tl: Tools, haystack: str, rs: Reasoning, parallel: bool) -> None:
    if _in_json(haystack, FUN_FIRST):
        tl.mode = T_JSON
    elif _in_json(haystack, ARG_FIRST):
        tl.mode = T_TAG_JSON
    else:
        tl.mode = T_TAG_TAGGED
    clean = haystack
    if rs.start:
        pos = haystack.find(rs.start)
        if pos >= 0:
            clean = haystack[:pos] + haystack[pos + len(rs.start) :]
    if rs.end:
        pos = clean.find(rs.end)
        if pos >= 0:
            clean = clean[:pos] + clean[pos + len(rs.end) :]
    if tl.mode == T_JSON:
        _json_native(tl, clean)
        if parallel:
            _json_native_parallel(r, tl)
    else:
        _non_json(tl, clean)
    tl.section_end = trim(tl.section_end)
    tl.per_call_end = trim(tl.per_call_end)


class AnalysisFailed(Exception):
    """llama.cpp's analysis throws (e.g. the call's JSON does not parse)."""


def _json_native(tl: Tools, clean: str) -> None:
    start = clean.find("{")
    end = clean.rfind("}")
    if start < 0:
        raise AnalysisFailed("no JSON object in the rendered tool call")
    cut = clean[start : end + 1] if end >= start else clean[start:]
    try:
        struct = json.loads(cut)
    except ValueError as exc:
        raise AnalysisFailed(f"the rendered tool call is not JSON: {exc}") from exc
    if not isinstance(struct, dict):
        raise AnalysisFailed("the rendered tool call is not a JSON object")

    def dump(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    def register(prefix: str, key: str, value: Any) -> None:
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, str) and "call0000" in value:
            tl.id_field = full
        elif isinstance(value, str) and value == FUN_FIRST:
            tl.name_field = full
        elif ARG_FIRST in dump(value):
            tl.args_field = full
        elif "id" in key:
            tl.gen_id_field = full

    for key, value in struct.items():
        if key == FUN_FIRST:
            tl.fun_name_is_key = True
            tl.name_field = ""
            tl.args_field = ""
        else:
            if isinstance(value, dict) and ARG_FIRST not in dump(value):
                tl.function_field = key
                for k2, v2 in value.items():
                    register(key, k2, v2)
            register("", key, value)
    array = s.seq(
        s.tag("pre", s.seq(s.lit("["), s.space())),
        s.lit(cut),
        s.tag("post", s.seq(s.space(), s.lit("]"))),
    )
    ok, tags = s.parse_anywhere(array, clean)
    if ok:
        tl.tools_array_wrapped = True
        start -= len(tags.get("pre", ""))
        end += len(tags.get("post", ""))
    end += 1
    located: list[tuple[int, str]] = []
    for name in (tl.name_field, tl.args_field, tl.id_field, tl.gen_id_field):
        if name:
            at = clean.find(name)
            located.append((at if at >= 0 else 1 << 62, name))
    located.sort()
    tl.parameter_order = [name for _, name in located]
    tl.section_start = trim_leading(clean[:start])
    tl.section_end = trim(clean[end:])
    if tl.tools_array_wrapped and tl.section_end == "]":
        tl.section_end = ""


def _json_native_parallel(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL), tool_probe(FIRST_CALL, SECOND_CALL))
    if cmp is None:
        return
    if tl.section_start and tl.section_start in cmp.diff.right:
        tl.per_call_start, tl.per_call_end = tl.section_start, tl.section_end
        tl.section_start = tl.section_end = ""


def _non_json(tl: Tools, clean: str) -> None:
    fun = FUN_FIRST
    fun_marker_p = s.tag(
        "fun_marker",
        s.choice(
            s.seq(
                s.tag("fun_pre", s.seq(s.lit("<"), s.until(">", fun))),
                s.lit(fun),
                s.tag(
                    "fun_post",
                    s.seq(s.negate(s.seq(s.space(), s.lit("<"))), s.until(">"), s.lit(">")),
                ),
                s.space(),
            ),
            s.seq(
                s.tag("fun_pre", s.seq(s.lit("["), s.until("]", fun))),
                s.lit(fun),
                s.tag(
                    "fun_post",
                    s.seq(
                        s.negate(s.seq(s.space(), s.lit("["), s.until("]"), s.lit("]"))),
                        s.space(),
                    ),
                ),
            ),
        ),
    )
    ok, fun_tags = s.parse_anywhere(fun_marker_p, clean)
    fun_marker = fun_tags.get("fun_marker", fun) if ok else fun
    per_tool = s.seq(
        s.tag("sec_start", s.seq(s.marker(), s.space())),
        s.tag("call_start", s.seq(s.marker(), s.space())),
        s.tag("fun_pre", s.until(fun_marker)),
        s.lit(fun_marker),
        s.tag("rest", s.rest()),
    )
    section = s.seq(
        s.tag("sec_start", s.seq(s.marker(), s.space())),
        s.lit(fun_marker),
        s.tag("rest", s.rest()),
    )
    ok, tags = s.parse_anywhere(per_tool, clean)
    if ok:
        double_closer = s.seq(
            s.tag("call_end", s.seq(s.marker(), s.space())),
            s.tag("sec_end", s.seq(s.marker(), s.space())),
            s.end(),
        )
        _, end_tags = s.parse_anywhere(double_closer, tags.get("rest", ""))
        tl.name_prefix = fun_tags.get("fun_pre", "") + tl.name_prefix
    else:
        _, tags = s.parse_anywhere(section, clean)
        single_closer = s.seq(s.tag("sec_end", s.seq(s.marker(), s.space())), s.end())
        _, end_tags = s.parse_anywhere(single_closer, tags.get("rest", ""))
    tl.per_call_start = tags.get("call_start", "")
    tl.per_call_end = end_tags.get("call_end", "")
    tl.section_start = tags.get("sec_start", "")
    tl.section_end = end_tags.get("sec_end", "")


def _per_call_markers(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL), tool_probe(FIRST_CALL, SECOND_CALL))
    if cmp is None:
        return
    common = diff_split(cmp.diff.suffix, cmp.diff.right)
    second = trim_leading(common.right)
    if tl.section_start and second.startswith(tl.section_start):
        tl.per_call_start, tl.per_call_end = tl.section_start, tl.section_end
        tl.section_start = tl.section_end = ""
    if tl.per_call_end:
        one = cmp.a.count(tl.per_call_end)
        two = cmp.b.count(tl.per_call_end)
        if one > 0 and one == two:
            tl.section_end = tl.per_call_end
            tl.per_call_end = ""


def _not_marker_any() -> s.P:
    return s.seq(s.negate(s.marker()), s.any_char())


def _last_marker() -> s.P:
    return s.seq(s.marker(), s.zero_or_more(_not_marker_any()), s.end())


def _from_last_marker(tag: str) -> s.P:
    """Anything, then (tagged) the text's last marker and the non-marker text after it."""
    return s.seq(
        s.zero_or_more(s.seq(s.negate(_last_marker()), s.any_char())), s.tag(tag, _last_marker())
    )


def _function_markers(r: Renderer, tl: Tools) -> None:
    foo = tool_probe(FIRST_CALL)
    cmp = r.compare(foo, tool_probe(SECOND_CALL))
    if cmp is None:
        return
    diff = cmp.diff
    if FUN_FIRST not in diff.left or FUN_SECOND not in diff.right:
        return
    prefix_marker = tl.per_call_start or tl.section_start
    if prefix_marker and diff.prefix.rfind(prefix_marker) >= 0:
        tl.name_prefix = diff.prefix[diff.prefix.rfind(prefix_marker) + len(prefix_marker) :]
    name_p = s.seq(
        s.tag("pre", s.until(FUN_FIRST)),
        s.lit(FUN_FIRST),
        s.tag("post", s.zero_or_more(_not_marker_any())),
    )
    ok, tags = s.parse(name_p, diff.left)
    if ok:
        tl.name_prefix += tags.get("pre", "")
        tl.name_suffix = tags.get("post", "")
    if tl.mode == T_TAG_JSON:
        non_json = s.choice(
            s.marker(), s.seq(s.negate(s.lit("{")), s.negate(s.lit("[")), s.any_char())
        )
        after_json = s.seq(s.zero_or_more(_not_marker_any()), s.marker())
        suffix_p = s.seq(s.tag("ext", s.zero_or_more(non_json)), after_json)
        ok, tags = s.parse(suffix_p, diff.suffix)
        if ok:
            tl.name_suffix += tags.get("ext", "")
    else:
        suffix_p = s.tag("ext", s.zero_or_more(_not_marker_any()))
        ok, tags = s.parse(suffix_p, diff.suffix)
        if ok:
            ext = tags.get("ext", "")
            tl.name_suffix += ext

            def arg_start() -> s.P:
                return s.seq(s.marker(), s.space(), s.choice(s.lit(ARG_FIRST), s.lit(ARG_SECOND)))

            sep_p = s.seq(
                s.tag("sep", s.zero_or_more(s.seq(s.negate(arg_start()), s.any_char()))),
                arg_start(),
            )
            ok, tags = s.parse(sep_p, diff.suffix[len(ext) :])
            if ok:
                tl.args_separator = trim(tags.get("sep", ""))
    suffix_marker = tl.per_call_end or tl.section_end
    closer_suffix = ""
    if not suffix_marker:
        nocall = r.compare(foo, _with(foo, [USER, assistant_turn(ASSISTANT_MSG)]))
        if nocall is not None:
            left = nocall.diff.left
            at = left.find("YYYY")
            # std::string::npos + 4 wraps around to 3
            closer_suffix = left[at + 4 :] if at >= 0 else left[3:]
    else:
        at = diff.suffix.find(suffix_marker)
        closer_suffix = diff.suffix[:at] if at >= 0 else diff.suffix
    if closer_suffix:
        if tl.mode == T_TAG_TAGGED:
            closer_p = s.seq(
                s.until("YYYY"),
                s.lit("YYYY"),
                s.space(),
                s.marker(),
                s.space(),
                s.tag("close", s.rest()),
            )
            ok, tags = s.parse(closer_p, closer_suffix)
            if ok:
                tl.close = tags.get("close", "")
        elif tl.mode == T_TAG_JSON:
            closer_p = s.seq(s.until("YYYY"), s.lit("YYYY"), s.tag("post_val", s.rest()))
            ok, tags = s.parse(closer_p, closer_suffix)
            if ok:
                post = tags.get("post_val", "")
                pos = max(post.rfind("}"), post.rfind("]"))
                if 0 <= pos < len(post) - 1:
                    tl.close = trim_leading(post[pos + 1 :])
    tl.close = trim_leading(tl.close)


def _argument_name_markers(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL_ONE_ARG), tool_probe(FIRST_CALL_OTHER_ARG))
    if cmp is None:
        return
    diff = cmp.diff
    if not diff.left or not diff.right:
        return
    left_p = s.seq(
        s.tag("pre", s.until(ARG_FIRST)), s.lit(ARG_FIRST), s.tag("suffix", s.until('"', "X"))
    )
    right_p = s.seq(
        s.tag("pre", s.until(ARG_SECOND)), s.lit(ARG_SECOND), s.tag("suffix", s.until('"', "Y"))
    )
    lok, lt = s.parse_anywhere(left_p, diff.left)
    rok, rt = s.parse_anywhere(right_p, diff.right)
    if (
        lok
        and rok
        and lt.get("pre", "")
        and lt.get("pre", "") == rt.get("pre", "")
        and lt.get("suffix", "") == rt.get("suffix", "")
    ):
        tl.arg_name_prefix = lt.get("pre", "")
        tl.arg_name_suffix = lt.get("suffix", "")
    elif diff.left.startswith(ARG_FIRST) and diff.right.startswith(ARG_SECOND):
        pre_p = _from_last_marker("name_prefix")
        ok, tags = s.parse(pre_p, diff.prefix)
        tl.arg_name_prefix = tags.get("name_prefix", "") if ok else diff.prefix
        after_first = diff.left[len(ARG_FIRST) :] + diff.suffix
        suffix_p = s.tag("suffix", s.seq(s.zero_or_more(_not_marker_any()), s.marker(), s.space()))
        ok, tags = s.parse_anywhere(suffix_p, after_first)
        if ok:
            tl.arg_name_suffix = tags.get("suffix", "")


def _argument_value_markers(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL_ONE_ARG), tool_probe(FIRST_CALL_ONE_ARG_OTHER_VAL))
    if cmp is None:
        return
    diff = cmp.diff
    if diff.left != "XXXX" or diff.right != "YYYY":
        return
    ending = ARG_FIRST + tl.arg_name_suffix
    prefix = diff.prefix
    if prefix.rfind(ending) >= 0:
        prefix = prefix[prefix.rfind(ending) + len(ending) :]
    if prefix:
        prefix_p = _from_last_marker("val_prefix")
        ok, tags = s.parse(prefix_p, prefix)
        tl.arg_value_prefix = tags.get("val_prefix", "") if ok else prefix
    value_suffix = diff.suffix
    if tl.close:
        at = value_suffix.find(tl.close)
        if at >= 0:
            value_suffix = value_suffix[:at]
    elif tl.per_call_end or tl.section_end:
        marker = tl.per_call_end or tl.section_end
        at = value_suffix.find(marker)
        if at >= 0:
            value_suffix = value_suffix[:at]
    if trim(value_suffix):
        tl.arg_value_suffix = value_suffix


def _argument_separator(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL_ONE_ARG), tool_probe(FIRST_CALL))
    if cmp is None:
        return
    if cmp.diff.right:
        tl.arg_separator = until_common_prefix(cmp.diff.right, ARG_FIRST, ARG_SECOND)


def _find_last_marker(text: str) -> str:
    p = s.seq(s.zero_or_more(s.seq(s.negate(_last_marker()), s.any_char())), s.tag("m", s.marker()))
    ok, tags = s.parse_anywhere(p, text)
    return tags.get("m", "") if ok else ""


def _find_first_marker(text: str) -> str:
    ok, tags = s.parse_anywhere(s.tag("m", s.marker()), text)
    return tags.get("m", "") if ok else ""


def _call_id_markers(r: Renderer, tl: Tools) -> None:
    cmp = r.compare(tool_probe(FIRST_CALL), tool_probe(FIRST_CALL_ALT_ID))
    if cmp is None:
        return
    diff = cmp.diff
    if not diff.left and not diff.right:
        return
    common_id = CALL_ID_001[: common_prefix_length(CALL_ID_001, CALL_ID_999)]
    in_prefix = diff.prefix.rfind(FUN_FIRST)
    in_suffix = diff.suffix.find(FUN_FIRST)
    if in_prefix >= 0 and in_suffix < 0:
        args_in_prefix = diff.prefix.find("{", in_prefix)
        args_in_suffix = diff.suffix.find("{")
        if args_in_suffix >= 0 and args_in_prefix < 0:
            tl.id_pos = ID_BETWEEN
            after_func = diff.prefix[in_prefix + len(FUN_FIRST) :]
            id_p = s.seq(
                s.tag("prefix", s.marker()),
                s.zero_or_more(
                    s.seq(s.negate(s.marker()), s.negate(s.lit(common_id)), s.any_char())
                ),
                s.lit(common_id),
            )
            ok, tags = s.parse_anywhere(id_p, after_func)
            tl.id_prefix = tags.get("prefix", "") if ok else _find_last_marker(after_func)
            suf_p = s.seq(
                s.zero_or_more(s.seq(s.negate(s.marker()), s.negate(s.lit("{")), s.any_char())),
                s.tag("suffix", s.marker()),
            )
            ok, tags = s.parse_anywhere(suf_p, diff.suffix)
            if ok:
                tl.id_suffix = tags.get("suffix", "")
        elif args_in_prefix >= 0:
            tl.id_pos = ID_POST
            after_args = diff.prefix[args_in_prefix:]
            brace = after_args.rfind("}")
            if brace >= 0:
                tl.id_prefix = _find_last_marker(after_args[brace + 1 :])
            tl.id_suffix = _find_first_marker(diff.suffix)
    elif in_suffix >= 0 and in_prefix < 0:
        tl.id_pos = ID_PRE
        tl.id_prefix = _find_last_marker(diff.prefix)
        tl.id_suffix = _find_first_marker(diff.suffix[:in_suffix])
    if tl.id_prefix == tl.args_end:
        tl.id_prefix = ""
    if tl.id_suffix == tl.args_start:
        tl.id_suffix = ""
    if tl.id_pos != ID_NONE and tl.id_suffix and tl.per_call_end.startswith(tl.id_suffix):
        tl.per_call_end = ""


def _user_start(r: Renderer) -> str:
    cmp = r.compare(Probe(()), Probe((USER,)))
    if cmp is None:
        two = {"role": "user", "content": USER_MSG_TWO}
        asst = assistant_turn(ASSISTANT_MSG)
        cmp = r.compare(Probe((two, asst)), Probe((two, asst, USER)))
        if cmp is None:
            return ""
    msg = cmp.diff.right
    if ASSISTANT_MSG in msg:
        msg = msg[msg.find(ASSISTANT_MSG) + len(ASSISTANT_MSG) :]
    at = msg.find(USER_MSG)
    candidate = msg[:at] if at >= 0 else msg
    out: list[str] = []
    seen_marker = False
    for seg in segmentize(candidate):
        low = seg.value.lower()
        if seg.type == MARKER and not seen_marker and ("end" in low or "close" in low):
            continue
        if seg.type != MARKER and not seen_marker and not trim(seg.value):
            continue
        seen_marker |= seg.type == MARKER
        out.append(seg.value)
    return trim("".join(out))


def _assistant_start(r: Renderer, rs: Reasoning) -> str:
    cmp = r.compare(Probe((USER,)), Probe((USER, assistant_turn(ASSISTANT_MSG))))
    if cmp is None:
        return ""
    msg = cmp.diff.right
    at = msg.find(ASSISTANT_MSG)
    prefix = msg[:at] if at >= 0 else msg
    if rs.start and trim(rs.start) in prefix:
        prefix = prefix[: prefix.find(trim(rs.start))]
    if rs.end and trim(rs.end) in prefix:
        prefix = prefix[: prefix.find(trim(rs.end))]
    return trim(prefix)


def _collect_preserved(a: Analysis) -> None:
    rs, ct, tl = a.reasoning, a.content, a.tools
    for token in (
        rs.start, rs.end, ct.start, ct.end, tl.section_start, tl.section_end,
        tl.per_call_start, tl.per_call_end, tl.name_prefix, tl.name_suffix,
        tl.args_separator, tl.close, tl.args_start, tl.args_end, tl.arg_name_prefix,
        tl.arg_name_suffix, tl.arg_separator, tl.arg_value_prefix, tl.arg_value_suffix,
        tl.id_prefix, tl.id_suffix,
    ):  # fmt: skip
        t = trim(token)
        if t and t not in a.preserved_tokens:
            a.preserved_tokens.append(t)


# ---------------------------------------------------------------------------------- fixes

Workaround = Callable[[str, Analysis], None]


def _old_think_split(src: str, a: Analysis) -> None:
    if (
        "content.split('</think>')" in src
        and "reasoning_content" not in src
        and "<SPECIAL_12>" not in src
        and a.reasoning.mode == R_NONE
    ):
        a.reasoning = Reasoning(R_TAG, "<think>", "</think>")
        a.preserved_tokens += ["<think>", "</think>"]


def _separate_response(src: str, a: Analysis) -> None:
    phrase = (
        "Write your thoughts between <think></think> and write your response between "
        "<response></response>"
    )
    if phrase in src:
        a.reasoning = Reasoning(R_TAG, "<think>", "</think>")
        a.content = Content(C_WRAPPED_WITH_REASONING, "<response>", "</response>")
        a.preserved_tokens += ["<think>", "</think>", "<response>", "</response>"]


def _chatbot_token(src: str, a: Analysis) -> None:
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not a.content.start:
        a.content = Content(C_WRAPPED, "<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>")
        a.preserved_tokens += ["<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"]
        a.user_start = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>"


def _function_tag(src: str, a: Analysis) -> None:
    fingerprint = (
        'set has_code_interpreter = tools | selectattr("type", "equalto", '
        '"code_interpreter") | list | length > 0'
    )
    if fingerprint in src:
        a.content.mode = C_PLAIN
        a.content.end = ""
        tl = a.tools
        tl.name_prefix = ""
        tl.section_start = tl.section_end = ""
        tl.per_call_start, tl.per_call_end = "<function=", "</function>"
        tl.close = ""
        a.preserved_tokens = ["<|eot_id|>", "<|eom_id|>", "<function=", ">", "</function>"]


def _tool_type_sep(src: str, a: Analysis) -> None:
    fingerprint = (
        "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
        "'<｜tool▁sep｜>'"
    )
    if fingerprint in src:
        tl = a.tools
        tl.section_start = "<｜tool▁calls▁begin｜>"
        tl.section_end = "<｜tool▁calls▁end｜>"
        tl.per_call_start = "<｜tool▁call▁begin｜>function"
        tl.name_prefix = "<｜tool▁sep｜>"
        tl.per_call_end = "<｜tool▁call▁end｜>"
        tl.close = "```"


def _special_toolcall(src: str, a: Analysis) -> None:
    if all(m in src for m in ("<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOL_RESPONSE>")):
        tl = a.tools
        tl.mode = T_JSON
        tl.section_start = tl.section_end = ""
        tl.per_call_start, tl.per_call_end = "<TOOLCALL>", "</TOOLCALL>"
        tl.tools_array_wrapped = True
        a.content = Content(C_PLAIN, "", "")
        a.reasoning = Reasoning(R_TAG, "<think>\n", "</think>")
        a.assistant_start = "<SPECIAL_11>Assistant"
        a.user_start = "<SPECIAL_11>User"
        a.preserved_tokens = ["<SPECIAL_11>", "</think>", "<TOOLCALL>", "</TOOLCALL>"]


def _role_markers(src: str, a: Analysis) -> None:
    if (
        "{%- set system_prompt = '<|start_header_id|>' + 'system' + '<|end_header_id|>\\n\\n'"
        " + message['content'] | trim + '\\n' + system_prompt_suffix + '<|eot_id|>' -%}"
    ) in src:
        a.assistant_start = "<|start_header_id|>assistant<|end_header_id|>"
        a.user_start = "<|start_header_id|>user<|end_header_id|>"
    if "<|begin|>assistant<|think|><|end|>" in src:
        a.assistant_start = "<|begin|>assistant"
    if "if not loop.last and '[BEGIN FINAL RESPONSE]' in asst_text" in src:
        a.user_start = "<|begin_user|>"
        a.assistant_start = "<|begin_assistant|>"


def _openai_wrapper(src: str, a: Analysis) -> None:
    if 'Respond in the format {"name": function name' in src and "Do not use variables." in src:
        a.tools.openai_wrapper = True


def _bare_tags(src: str, a: Analysis) -> None:
    if "laguna_glm_thinking" in src:
        a.reasoning.start = trim(a.reasoning.start)
        a.reasoning.end = trim(a.reasoning.end)
        tl = a.tools
        tl.arg_value_prefix = trim(tl.arg_value_prefix)
        tl.arg_value_suffix = trim(tl.arg_value_suffix)
        tl.arg_separator = trim(tl.arg_separator)
        tl.tolerate_intertag_whitespace = True
        a.additional_stops.append("</assistant>")


def _trimmed_value_suffix(src: str, a: Analysis) -> None:
    if "Bailing V3 chat template" in src:
        a.tools.arg_value_suffix = trim(a.tools.arg_value_suffix)
        a.tools.tolerate_intertag_whitespace = True


# llama.cpp's fingerprinted fixes, in its order (they are part of the behaviour being matched)
WORKAROUNDS: tuple[Workaround, ...] = (
    _old_think_split,
    _separate_response,
    _chatbot_token,
    _function_tag,
    _tool_type_sep,
    _special_toolcall,
    _role_markers,
    _openai_wrapper,
    _bare_tags,
    _trimmed_value_suffix,
)


def analyze(
    template: ChatTemplate, support: ToolCallSupport | None = None, text_arguments: bool = False
) -> Analysis:
    """The whole analysis of one template (raises AnalysisFailed where llama.cpp throws).

    ``support`` replaces llama.cpp's capability probe (``tool_call_support``): the calls'
    phases run when it says the template takes calls. ``text_arguments`` gives the probes'
    call arguments as JSON text (``Renderer``)."""
    r = Renderer(template, text_arguments)
    a = Analysis()
    if support is None:
        support = tool_call_support(template)
    a.supports_tool_calls, a.supports_parallel_tool_calls = support.calls, support.parallel
    rs = Reasoning()
    _reasoning_presence(r, rs)
    _thinking_enabled(r, rs)
    if a.supports_tool_calls:
        _reasoning_scope(r, rs)
    a.reasoning = rs
    a.content = _content(r, rs)
    if a.supports_tool_calls:
        a.tools = _tools(r, rs, a.supports_parallel_tool_calls)
    a.assistant_start = _assistant_start(r, rs)
    a.user_start = _user_start(r)
    _collect_preserved(a)
    for fix in WORKAROUNDS:
        fix(template.source, a)
    return a
