"""Issue 9 (constraints): Cohere2 MoE's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison is dev/grammar_text.py; these run without ../shared. The expected
texts in tests/data/grammar/cohere2_moe_*.gbnf are what llama.cpp's oracle (the corpus' build,
commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the template and requests below; only
the numbers of the automaton rules may differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER_REQUIRED, HI, WEATHER_UNIT_BARE_TIME, json_schema

# the markers in the comment pick llama.cpp's Cohere2 MoE handler
TEMPLATE = (
    "{#- <|START_TEXT|> <|START_ACTION|> -#}"
    "{%- for m in messages %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ m.content }}"
    "<|END_OF_TURN_TOKEN|>{% endfor %}"
    "{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    "<|START_THINKING|>{% endif %}"
)
TOOLS = WEATHER_UNIT_BARE_TIME
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: the action list's rules only
    "auto": {"tools": TOOLS, "parallel_tool_calls": True},
    # eager: the thought kept whole as content, then only the action list
    "required_parallel_noreason": {
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": True,
        "reasoning_format": "none",
    },
    # eager: the action list or the text block holding the schema's JSON value
    "tools_response_format": {
        "tools": TOOLS,
        "response_format": json_schema(ANSWER_REQUIRED),
    },
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_cohere2_moe_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.handler == "Cohere2 MoE"
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert normalize(turn.grammar.gbnf) == recorded(f"cohere2_moe_{name}")


def test_cohere2_moe_sets_no_grammar_for_plain_content() -> None:
    codec = Codec(TEMPLATE)
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
