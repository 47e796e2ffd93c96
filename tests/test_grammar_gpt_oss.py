"""Issue 9 (constraints): GPT-OSS's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison runs from dev/grammar_text.py; these run without ../shared. The
expected texts in tests/data/grammar_gpt_oss.json are what llama.cpp's oracle (the corpus'
build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the template and requests
below; only the numbers of the automaton rules may differ (tests/_grammar_names.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec

from ._grammar_names import renumbered
from .conftest import ROOT

EXPECTED = json.loads((ROOT / "tests" / "data" / "grammar_gpt_oss.json").read_text("utf-8"))
# harmony messages; the <|channel|> marker in the comment picks llama.cpp's GPT-OSS handler
TEMPLATE = (
    "{#- <|channel|> -#}"
    "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
HI = [{"role": "user", "content": "Hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: the call's rules only, woken by the recipient
    "auto": {"tools": TOOLS, "parallel_tool_calls": False},
    # eager: analysis and preamble messages, then a call
    "required-parallel": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    # eager: the final message holds the schema's JSON
    "response-format": {
        "response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}
    },
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_gpt_oss_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert renumbered(turn.grammar.gbnf) == renumbered(EXPECTED[name])


def test_gpt_oss_sets_no_grammar_without_calls_or_a_response_format() -> None:
    codec = Codec(TEMPLATE)
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
