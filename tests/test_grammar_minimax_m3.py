"""Issue 9 (constraints): MiniMax-M3's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison is tests/test_grammar_text.py; these run without ../shared. The
expected texts in tests/data/grammar/minimax_m3_*.gbnf are what llama.cpp's oracle (the corpus'
build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the template and requests
below; only the numbers of the automaton rules may differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.grammar import rules as g
from chatcodec.grammar.document import read_schema

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER, HI, PING, json_schema, tool

# the markers in the comment pick llama.cpp's MiniMax-M3 handler; the generation prompt opens
# the thought, which the grammar leaves out (it starts at the prompt's text before <mm:think>)
TEMPLATE = (
    "{#- ]<]minimax[>[ <tool_call> <invoke name= -#}"
    "{%- for m in messages %}]~b]{{ m.role }}\n{{ m.content }}[e~[\n{% endfor %}"
    "{% if add_generation_prompt %}]~b]ai\n<mm:think>{% endif %}"
)
# every kind of value the handler writes: a string (any text up to the close tag), an array
# (<item> elements), an object (member elements), a union (one branch per alternative) and {}
# (any JSON value: not taken as a string)
EDIT = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "lines": {"type": "array", "items": {"type": "integer"}},
        "options": {
            "type": "object",
            "properties": {"force": {"type": "boolean"}},
            "required": ["force"],
        },
        "mode": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "extra": {},
    },
    "required": ["path", "lines"],
}
TOOLS = [
    tool("edit", EDIT),
    PING,
]
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: the <tool_call> block's rules only, one call
    "auto": {"tools": TOOLS, "parallel_tool_calls": False},
    # eager: the prompt, the thought, the content, then calls
    "required_parallel": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    # eager: the schema's JSON fenced in ```json; without thinking the thought has no space
    "response_format": {
        "enable_thinking": False,
        "response_format": json_schema(ANSWER),
    },
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_minimax_m3_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert normalize(turn.grammar.gbnf) == recorded(f"minimax_m3_{name}")


def test_minimax_m3_sets_no_grammar_for_plain_content() -> None:
    codec = Codec(TEMPLATE)
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None


def test_an_empty_schema_is_not_taken_as_a_string() -> None:
    # llama.cpp's may_be_string: {} (and an allOf of {} only) constrain nothing, yet are no string
    assert not g.may_be_string(read_schema({}).root)
    assert not g.may_be_string(read_schema({"allOf": [{}]}).root)
    assert g.may_be_string(read_schema({"allOf": [{}, {"type": "string"}]}).root)
    assert g.may_be_string(read_schema({"type": ["integer", "string"]}).root)
