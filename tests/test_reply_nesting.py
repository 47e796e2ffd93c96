"""Deeply nested values: the parse never depends on Python's recursion limit.

The value parsers (``peg.json_value``, ``json_object``, ``json_array``,
``python_or_json_value``) read nesting with an explicit stack. The combinator grammar they
replaced is kept here as the reference: on generated values, their mutations and every prefix
of each, both give the same Result (status, end, nodes). Then replies with values nested
10,000 deep parse whole, partially and streamed in small chunks, on several families.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatcodec import ChatTemplate, Codec, probe_capabilities, to_template_messages
from chatcodec.reply import peg
from chatcodec.reply.families import gemma4 as g
from chatcodec.reply.mapper import json_escape_inner
from chatcodec.reply.peg import Choice, Literal, Node, Parser, Ref, Repeat, Seq, Space, Tag

from .conftest import template_source

# ------------------------------------------------------------------ the reference grammar


def _reference_json() -> dict[str, Parser]:
    """The recursive combinator grammar of the JSON value (peg.py before the stack)."""
    ws = Space()
    value = Ref()
    member = Seq(peg.python_string.children[0], ws, Literal(":"), ws, value)
    members = Seq(member, Repeat(Seq(ws, Literal(","), ws, member)))
    obj = Seq(Literal("{"), ws, Choice(Literal("}"), Seq(members, ws, Literal("}"))))
    elements = Seq(value, Repeat(Seq(ws, Literal(","), ws, value)))
    arr = Seq(Literal("["), ws, Choice(Literal("]"), Seq(elements, ws, Literal("]"))))
    string = peg.python_string.children[0]
    value.target = Choice(obj, arr, string, peg.json_number, peg.json_bool, peg.json_null)
    return {"value": value, "object": obj, "array": arr}


def _reference_python() -> Parser:
    """The recursive combinator grammar of llama.cpp's python-or-json value."""
    ws = Space()
    value = Ref()
    member = Seq(peg.python_string, ws, Literal(":"), ws, value)
    members = Seq(member, Repeat(Seq(ws, Literal(","), ws, member)))
    mapping = Seq(Literal("{"), ws, Choice(Literal("}"), Seq(members, ws, Literal("}"))), ws)
    elements = Seq(value, Repeat(Seq(Literal(","), ws, value)))
    sequence = Seq(Literal("["), ws, Choice(Literal("]"), Seq(elements, ws, Literal("]"))), ws)
    value.target = Choice(
        mapping,
        sequence,
        peg.python_string,
        peg.json_number,
        Choice(Literal("True"), Literal("False")),
        Literal("None"),
        peg.json_bool,
        peg.json_null,
    )
    return value


REFERENCE = _reference_json()
PAIRS = (
    (peg.json_value, REFERENCE["value"]),
    (peg.json_object, REFERENCE["object"]),
    (peg.json_array, REFERENCE["array"]),
    (peg.python_or_json_value, _reference_python()),
)

# ------------------------------------------------------------------ generated values

_SPACE = st.sampled_from(["", "", " ", "\n", " \t "])
_SCALARS = st.sampled_from(
    [
        "0",
        "-12.5e+3",
        "1.",
        "01",
        "-",
        "true",
        "false",
        "null",
        "True",
        "None",
        '"a b"',
        '"x\\"y"',
        '"\\u00e9"',
        '"\\q"',
        "'single'",
        "'it\\'s'",
        '"unclosed',
    ]
)


def _container(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def array(items: list[str], a: str, b: str, c: str) -> str:
        return "[" + a + (b + "," + c).join(items) + b + "]" + c

    def obj(items: list[tuple[str, str]], a: str, b: str, c: str) -> str:
        body = (b + "," + c).join(k + a + ":" + c + v for k, v in items)
        return "{" + a + body + b + "}" + c

    key = st.sampled_from(['"k"', '"a b"', "'p'", "k", '"\\n"'])
    return st.one_of(
        st.builds(array, st.lists(children, max_size=4), _SPACE, _SPACE, _SPACE),
        st.builds(obj, st.lists(st.tuples(key, children), max_size=3), _SPACE, _SPACE, _SPACE),
    )


VALUES = st.recursive(_SCALARS, _container, max_leaves=12)
EDITS = st.lists(
    st.tuples(st.integers(0, 200), st.sampled_from(["", ",", "]", "}", "[", "{", ":", '"', " "])),
    max_size=2,
)


def _mutate(text: str, edits: list[tuple[int, str]]) -> str:
    for at, insert in edits:
        at %= len(text) + 1
        # an empty insert deletes the character there
        text = text[:at] + insert + text[at + (0 if insert else 1) :]
    return text


def _same(text: str, pos: int) -> None:
    for new, old in PAIRS:
        assert new.parse(text, pos) == old.parse(text, pos), (text, pos, new)


@settings(max_examples=400, deadline=None)
@given(VALUES, EDITS, st.sampled_from(["", "x", " "]))
def test_stack_parser_equals_the_combinator_grammar_on_every_prefix(
    value: str, edits: list[tuple[int, str]], lead: str
) -> None:
    text = lead + _mutate(value, edits)
    for cut in range(len(lead), len(text) + 1):
        _same(text[:cut], len(lead))


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2, {"b": null}]}',
        "[1 , 2]",
        "[[1] , 2]",
        "{'a' : True , \"b\": [None,'x'] }  ",
        '{"a":1,}',
        "[1,]",
        '{"a" 1}',
        "[1 2]",
        '"\\u12',
        "[tr",
        "{",
        "",
        "1.x",
    ],
)
def test_stack_parser_equals_the_combinator_grammar_on_known_edges(text: str) -> None:
    for cut in range(len(text) + 1):
        _same(text[:cut], 0)


def test_depth_beyond_the_recursion_limit_parses_at_the_value_level() -> None:
    depth = 4 * sys.getrecursionlimit() + 10_000
    arrays = "[" * depth + "]" * depth
    objects = '{"a": ' * depth + "1" + "}" * depth
    python = "{'a': " * depth + "[True]" + "}" * depth
    assert peg.json_value.parse(arrays, 0) == peg.Result(peg.SUCCESS, len(arrays))
    assert peg.json_value.parse(objects, 0) == peg.Result(peg.SUCCESS, len(objects))
    assert peg.python_or_json_value.parse(python, 0) == peg.Result(peg.SUCCESS, len(python))
    cut = objects[: len(objects) // 2]
    assert peg.json_value.parse(cut, 0) == peg.Result(peg.NEED_MORE, len(cut))
    broken = arrays[:depth] + "x" + arrays[depth:]
    assert peg.json_value.parse(broken, 0) == peg.Result(peg.FAIL, 0)
    assert peg.json_array.parse(broken, 0) == peg.Result(peg.FAIL, 1)


# ------------------------------------------------------------------ Gemma 4's argument dict


def _reference_gemma4() -> Parser:
    """Gemma 4's recursive combinator grammar (gemma4.py before the stack)."""
    ws = Space()
    value = Ref()
    string = Tag(
        g.GEMMA4_STRING,
        Seq(Literal(g.QUOTE), Tag(g.GEMMA4_STRING_CONTENT, peg.Until(g.QUOTE)), Literal(g.QUOTE)),
    )
    key = Tag(
        g.GEMMA4_DICT_KEY,
        Seq(Tag(g.GEMMA4_DICT_KEY_NAME, peg.CharsExcept(":}", 1, -1)), Literal(":")),
    )
    member = Tag(g.GEMMA4_DICT_KV, Seq(key, ws, value))
    members = Seq(member, Repeat(Seq(Literal(","), ws, member)))
    mapping = Tag(
        g.GEMMA4_DICT, Seq(Literal("{"), ws, Choice(Literal("}"), Seq(members, ws, Literal("}"))))
    )
    elements = Seq(value, Repeat(Seq(Literal(","), ws, value)))
    array = Tag(
        g.GEMMA4_ARRAY,
        Seq(Literal("["), ws, Choice(Literal("]"), Seq(elements, ws, Literal("]")))),
    )
    scalar = Choice(peg.json_number, peg.json_bool, peg.json_null)
    value.target = Tag(g.GEMMA4_VALUE, Choice(string, mapping, array, Tag(g.GEMMA4_SCALAR, scalar)))
    return mapping


def _reference_gemma4_json(node: Node, text: str) -> str:
    """Gemma 4's recursive node-to-JSON (gemma4.py before the stack)."""
    if node.end <= node.start:
        return ""
    tag = node.tag
    if tag in (g.GEMMA4_SCALAR, g.GEMMA4_DICT_KEY_NAME):
        return text[node.start : node.end]
    if tag == g.GEMMA4_STRING_CONTENT:
        return json_escape_inner(text[node.start : node.end])
    if tag == g.GEMMA4_STRING:
        if not node.children:
            return '"'
        inner = _reference_gemma4_json(node.children[0], text)
        return '"' + inner + ("" if node.partial else '"')
    if tag in (g.GEMMA4_ARRAY, g.GEMMA4_DICT):
        inner = ",".join(_reference_gemma4_json(c, text) for c in node.children)
        close = "]" if tag == g.GEMMA4_ARRAY else "}"
        return ("[" if tag == g.GEMMA4_ARRAY else "{") + inner + ("" if node.partial else close)
    if tag == g.GEMMA4_DICT_KEY:
        name = _reference_gemma4_json(node.children[0], text) if node.children else ""
        return '"' + json_escape_inner(name) + ("" if node.partial else '":')
    if tag == g.GEMMA4_DICT_KV:
        return "".join(_reference_gemma4_json(c, text) for c in node.children)
    if tag == g.GEMMA4_VALUE:
        return _reference_gemma4_json(node.children[0], text) if node.children else ""
    return ""


GEMMA4_REFERENCE = _reference_gemma4()
GEMMA4_ARGUMENTS = g.Gemma4Arguments()
_Q = g.QUOTE
_GEMMA4_SCALARS = st.sampled_from(
    ["0", "-2.5", "1.", "true", "null", "nul", _Q + "a b" + _Q, _Q + "x", _Q + _Q, "<|", "x"]
)


def _gemma4_container(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    def array(items: list[str], a: str, b: str) -> str:
        return "[" + a + ("," + b).join(items) + b + "]"

    def obj(items: list[tuple[str, str]], a: str, b: str) -> str:
        return "{" + a + ("," + b).join(k + ":" + a + v for k, v in items) + b + "}"

    key = st.sampled_from(["city", "a b", "k,", "x"])
    return st.one_of(
        st.builds(array, st.lists(children, max_size=3), _SPACE, _SPACE),
        st.builds(obj, st.lists(st.tuples(key, children), max_size=3), _SPACE, _SPACE),
    )


GEMMA4_VALUES = st.recursive(_GEMMA4_SCALARS, _gemma4_container, max_leaves=10)


def _same_gemma4(text: str, pos: int) -> None:
    new = GEMMA4_ARGUMENTS.parse(text, pos)
    old = GEMMA4_REFERENCE.parse(text, pos)
    assert new == old, (text, pos)
    for node in new.nodes:
        assert g.gemma4_json(node, text) == _reference_gemma4_json(node, text), (text, pos)


@settings(max_examples=300, deadline=None)
@given(GEMMA4_VALUES, EDITS, st.sampled_from(["", "x"]))
def test_gemma4_stack_parser_equals_the_combinator_grammar_on_every_prefix(
    value: str, edits: list[tuple[int, str]], lead: str
) -> None:
    text = lead + _mutate("{city:" + value + "}", edits)
    for cut in range(len(lead), len(text) + 1):
        _same_gemma4(text[:cut], len(lead))


# ------------------------------------------------------------------ whole replies

DEPTH = 10_000
DEEP = "[" * DEPTH + "]" * DEPTH
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                # not a string nor an array: every family reads the value as JSON
                "properties": {"city": {"type": "number"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [{"role": "user", "content": "What's the weather in Paris?"}]

# (template, reply with DEEP as the city argument, the call's arguments)
FAMILIES = [
    (
        "Qwen-Qwen3-0.6B.jinja",
        '<think>\n\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
        + DEEP
        + "}}\n</tool_call>",
        '{"city": ' + DEEP + "}",
    ),
    (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        '{"name": "get_weather", "parameters": {"city": ' + DEEP + "}}",
        '{"city": ' + DEEP + "}",
    ),
    (
        "openai-gpt-oss-120b.jinja",
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": ' + DEEP + "}",
        '{"city": ' + DEEP + "}",
    ),
    (
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        '[TOOL_CALLS]get_weather[ARGS]{"city": ' + DEEP + "}",
        '{"city": ' + DEEP + "}",
    ),
    (
        "deepseek-ai-DeepSeek-V3.2.jinja",
        '</think>\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="false">'
        + DEEP
        + "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        '{"city":' + DEEP + "}",
    ),
    (
        "MiniMax-M3.jinja",
        '</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="get_weather">'
        "]<]minimax[>[<city>" + DEEP + "]<]minimax[>[</city>]<]minimax[>[</invoke>\n"
        "]<]minimax[>[</tool_call>",
        '{"city":' + DEEP + "}",
    ),
    (
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja",
        "</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
        + DEEP
        + "\n</parameter>\n</function>\n</tool_call>",
        '{"city":' + DEEP + "}",
    ),
    (
        "LFM2-8B-A1B.jinja",
        "<|tool_call_start|>[get_weather(city=" + DEEP + ")]<|tool_call_end|>",
        '{"city":' + DEEP + "}",
    ),
    (
        "google-gemma-4-31B-it.jinja",
        "<|tool_call>call:get_weather{city:" + DEEP + "}<tool_call|>",
        '{"city":' + DEEP + "}",
    ),
]


@pytest.mark.parametrize(("template", "reply", "arguments"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_deep_arguments_parse_whole_partial_and_streamed(
    template: str, reply: str, arguments: str
) -> None:
    turn = Codec(template_source(template), eos_token="</s>").prepare(MESSAGES, TOOLS)
    message = turn.parse(reply)
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("get_weather", arguments)]
    assert turn.parse(reply, partial=True).tool_calls == message.tool_calls
    # cut inside the nesting: a partial parse, no error; a call shown holds a prefix
    cut = turn.parse(reply[: len(reply) // 2], partial=True)
    assert all(arguments.startswith(c.arguments) for c in cut.tool_calls)
    stream = turn.stream()
    for i in range(0, len(reply), 7):
        stream.feed(reply[i : i + 7])
    assert stream.finish().message.tool_calls == message.tool_calls


INLINE_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# a Hermes-style template: the auto parser reads its calls as JSON objects
INLINE_TOOLS_TEMPLATE = """{%- for m in messages -%}
<|im_start|>{{ m.role }}
{%- if m.content %}
{{ m.content }}{% endif %}
{%- if m.tool_calls %}{% for c in m.tool_calls %}
<tool_call>
{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% endfor -%}
{%- if tools %}<|im_start|>system
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""


def test_deep_arguments_without_the_shared_corpus() -> None:
    turn = Codec(INLINE_TOOLS_TEMPLATE, eos_token="<|im_end|>").prepare(MESSAGES, TOOLS)
    objects = '{"a": ' * DEPTH + "[]" + "}" * DEPTH
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": ' + objects
    reply += "}}\n</tool_call>"
    message = turn.parse(reply)
    assert [(c.name, c.arguments) for c in message.tool_calls] == [
        ("get_weather", '{"city": ' + objects + "}")
    ]
    # cut inside the nesting: the call is not complete yet, and nothing raises
    assert turn.parse(reply[: len(reply) // 2], partial=True).content == ""
    stream = turn.stream()
    for i in range(0, len(reply), 3):
        stream.feed(reply[i : i + 3])
    assert stream.finish().message.tool_calls == message.tool_calls


def test_deep_response_format_content_without_the_shared_corpus() -> None:
    turn = Codec(INLINE_TEMPLATE).prepare(MESSAGES, response_format={"type": "json_object"})
    reply = '{"a": ' * DEPTH + "1" + "}" * DEPTH
    assert turn.parse(reply).content == reply
    assert turn.parse(reply[:-DEPTH], partial=True).content == reply[:-DEPTH]
    stream = turn.stream()
    for i in range(0, len(reply), 5):
        stream.feed(reply[i : i + 5])
    assert stream.finish().message.content == reply


def test_deep_reply_arguments_go_back_into_the_next_prompt_as_their_text() -> None:
    # Python's json module stops at ~1,000 levels; the arguments of a parsed reply are never
    # decoded by the parse, and the next turn's messages keep such arguments as their text
    # (a template that renders calls with argument maps, as Qwen3's does)
    template = ChatTemplate(INLINE_TEMPLATE)
    arguments = '{"city": ' + DEEP + "}"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]}]
    caps = replace(probe_capabilities(template), tool_calls=True, string_arguments=False)
    converted = to_template_messages(messages, caps)
    assert converted.messages[1]["tool_calls"][0]["function"]["arguments"] == arguments
