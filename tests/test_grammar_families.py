"""Issue 9 (constraints): Gemma 4's, GPT-OSS's and Muse Glimmer's reply grammars are llama.cpp's,
rule for rule.

The corpus-wide comparison runs from dev/grammar_text.py; these run without ../shared, against
llama.cpp's answers for the templates below (tests/_family_grammar.py says where they came from).
"""

from __future__ import annotations

import pytest

from chatcodec import Codec

from ._family_grammar import HI, REQUESTS, TOOLS, expected
from ._grammar_compare import normalize

# the markers in each leading comment pick llama.cpp's handler (the messages are written as in
# the oracle's request; they do not shape the grammar)
TEMPLATES = {
    # Gemma 4's call marker
    "gemma4": (
        "{#- '<|tool_call>call:' -#}"
        "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
        "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
    ),
    # harmony messages and the <|channel|> marker: GPT-OSS
    "gpt_oss": (
        "{#- <|channel|> -#}"
        "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
        "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
    ),
    # the ATEM and <|eom|> markers: Muse Glimmer
    "muse_glimmer": (
        "{#- <atem:function_calls> <|eom|> -#}"
        "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
        "{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
    ),
}
EXPECTED = {family: expected(family) for family in TEMPLATES}


@pytest.mark.parametrize("name", sorted(REQUESTS))
@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_grammar_is_llama_cpps(family: str, name: str) -> None:
    turn = Codec(TEMPLATES[family]).prepare(HI, **REQUESTS[name])
    assert turn.grammar is not None
    assert turn.grammar.lazy == (name == "auto")
    assert normalize(turn.grammar.gbnf) == normalize(EXPECTED[family][name])


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_no_grammar_without_calls_or_a_response_format(family: str) -> None:
    codec = Codec(TEMPLATES[family])
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
