"""Issue 9 (constraints): Ministral 3 / Magistral's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison is tests/test_grammar_text.py; these run without ../shared. The
expected texts in tests/data/grammar/ministral_*.gbnf are what llama.cpp's oracle (the corpus'
build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the template and requests
below; only the numbers of the automaton rules may differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER, HI, WEATHER_BARE_TIME, json_schema

# the markers in the comment pick llama.cpp's "Ministral/Magistral Large 3" handler
TEMPLATE = (
    "{#- [SYSTEM_PROMPT] [TOOL_CALLS] [ARGS] -#}"
    "{%- for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}"
)
TOOLS = WEATHER_BARE_TIME
RESPONSE_FORMAT = json_schema(ANSWER)
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: any number of [TOOL_CALLS]name[ARGS]{json} calls
    "auto_parallel": {"tools": TOOLS, "parallel_tool_calls": True},
    # eager: the thought, the content, then exactly one call
    "required": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
    # eager: the JSON fenced in ```json (no thought without reasoning extraction)
    "response_format": {"response_format": RESPONSE_FORMAT, "reasoning_format": "none"},
    # llama.cpp's quirk: lazy (tools under auto) but the response format's parser has no
    # trigger rule, so the grammar is an empty root
    "response_format_beside_tools": {"tools": TOOLS, "response_format": RESPONSE_FORMAT},
}
LAZY = {"auto_parallel", "response_format_beside_tools"}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_ministral_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name in LAZY)
    assert normalize(turn.grammar.gbnf) == recorded(f"ministral_{name}")


def test_ministral_sets_no_grammar_for_plain_content() -> None:
    codec = Codec(TEMPLATE)
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
