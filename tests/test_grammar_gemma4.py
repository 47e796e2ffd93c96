"""Issue 9 (constraints): Gemma 4's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison runs from dev/grammar_text.py; these run without ../shared, against
llama.cpp's answers for the template below (tests/_family_grammar.py says where they came from).
"""

from __future__ import annotations

import pytest

from chatcodec import Codec

from ._family_grammar import HI, REQUESTS, TOOLS, expected
from ._grammar_compare import normalize

# the call marker in the comment picks llama.cpp's Gemma 4 handler (the messages are written as
# in the oracle's request; they do not shape the grammar)
TEMPLATE = (
    "{#- '<|tool_call>call:' -#}"
    "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
EXPECTED = expected("gemma4")


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_gemma4_grammar_is_llama_cpps(name: str) -> None:
    turn = Codec(TEMPLATE).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert normalize(turn.grammar.gbnf) == normalize(EXPECTED[name])


def test_gemma4_sets_no_grammar_without_calls_or_a_response_format() -> None:
    codec = Codec(TEMPLATE)
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
