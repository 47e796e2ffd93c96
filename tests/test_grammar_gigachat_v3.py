"""Issue 9 (constraints): GigaChat V3's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison is tests/test_grammar_text.py; these run without ../shared. The
expected texts in tests/data/grammar/gigachat_v3_*.gbnf are what llama.cpp's oracle (the
corpus' build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the template and
requests below; only the numbers of the automaton rules may differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER, HI, WEATHER_BARE_TIME, json_schema

# the markers pick llama.cpp's GigaChatV3 handler
TEMPLATE = (
    "{#- <|role_sep|> <|message_sep|> -#}"
    "{%- for m in messages %}{{ m.role }}<|role_sep|>\n{{ m.content }}<|message_sep|>\n\n"
    "{% endfor %}{% if add_generation_prompt %}assistant<|role_sep|>\n{% endif %}"
)
TOOLS = WEATHER_BARE_TIME
RESPONSE_FORMAT = json_schema(ANSWER)
REQUESTS: dict[str, dict[str, Any]] = {
    # lazy: at most one call after its marker
    "auto": {"tools": TOOLS, "parallel_tool_calls": False},
    # eager: the prefix, the content, exactly one call (parallel calls are not supported)
    "required_parallel": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_gigachat_v3_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert normalize(turn.grammar.gbnf) == recorded(f"gigachat_v3_{name}")


def test_gigachat_v3_response_format_changes_nothing() -> None:
    codec = Codec(TEMPLATE)
    # no grammar for a response format alone; beside required calls, the calls' grammar
    assert codec.prepare(HI, response_format=RESPONSE_FORMAT).grammar is None
    options: dict[str, Any] = {"tools": TOOLS, "tool_choice": "required"}
    with_format = codec.prepare(HI, response_format=RESPONSE_FORMAT, **options).grammar
    without = codec.prepare(HI, **options).grammar
    assert with_format is not None and without is not None
    assert with_format.gbnf == without.gbnf
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
