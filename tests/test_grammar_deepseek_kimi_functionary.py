"""Issue 9 (constraints), the reply grammar's text for DeepSeek V3.2/V4, Kimi K2 Thinking,
Kimi K3 and Functionary v3.2: the same GBNF as llama.cpp sets, rule for rule.

These run without ../shared: each expected text in tests/data/grammar/ is what llama.cpp's
oracle (chat_oracle, llama.cpp commit 0c1e570 as vendored in llama-cpp-python 0.3.36, the
corpus' build) gave for the template and request of the case of the same name. The automaton
rules (``until-N``, ``ac-N``) are numbered after llama.cpp's parser ids, so both sides are
renamed by order of first reference before comparing, as dev/grammar_text.py does.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER, GET_TIME, HI, PING, json_schema

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    # no type: llama.cpp takes it as not a string
                    "extra": {},
                },
                "required": ["city", "days"],
            },
        },
    },
    GET_TIME,
]
# PING has no parameters at all: llama.cpp takes an object without properties
RESPONSE_FORMAT = json_schema(ANSWER)

# the markers in the leading comment pick llama.cpp's handler
DSML_BODY = (
    "{%- for m in messages %}<｜{{ m.role }}｜>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜>"
    "{% if enable_thinking %}<think>{% else %}</think>{% endif %}{% endif %}"
)
DEEPSEEK_V32 = "{#- dsml_token DSML function_calls -#}" + DSML_BODY
DEEPSEEK_V4 = "{#- dsml_token DSML tool_calls -#}" + DSML_BODY
KIMI_K2 = "{#- <|tool_calls_section_begin|> <|tool_call_begin|> -#}" + (
    "{%- for m in messages %}<|im_{{ m.role }}|>{{ m.role }}<|im_middle|>{{ m.content }}"
    "<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"
)
KIMI_K3 = "{#- <|open|> <|close|> <|end_of_msg|> -#}" + (
    '{%- for m in messages %}<|open|>message role="{{ m.role }}"<|sep|>{{ m.content }}'
    "<|close|>message<|sep|><|end_of_msg|>{% endfor %}"
    '{% if add_generation_prompt %}<|open|>message role="assistant"<|sep|>'
    "<|open|>think<|sep|>{% endif %}"
)
FUNCTIONARY_V32 = "{#- >>>all >>>${recipient} -#}" + (
    "{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n>>>"
    "{% endif %}"
)

# name: (template, Codec.prepare options); the options are all spelled out, as the oracle
# was asked with them
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    # calls may begin inside the thought; the grammar is lazy, woken at the call block
    "deepseek-v32-thinking-parallel-calls": (
        DEEPSEEK_V32,
        {"tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": True},
    ),
    # V4 without thinking: the prompt's bare </think>, calls required (an eager grammar)
    "deepseek-v4-no-thinking-required-call": (
        DEEPSEEK_V4,
        {
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "enable_thinking": False,
        },
    ),
    # the response format in a ```json fence, no reasoning extracted
    "deepseek-v32-response-format": (
        DEEPSEEK_V32,
        {
            "response_format": RESPONSE_FORMAT,
            "parallel_tool_calls": False,
            "reasoning_format": "none",
        },
    ),
    # a lazy grammar from the first <|tool_call_begin|>, any number of calls
    "kimi-k2-parallel-calls": (
        KIMI_K2,
        {"tools": [*TOOLS, PING], "tool_choice": "auto", "parallel_tool_calls": True},
    ),
    # one call required (eager), no thought extracted
    "kimi-k2-required-call-no-reasoning": (
        KIMI_K2,
        {
            "tools": [*TOOLS, PING],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "reasoning_format": "none",
        },
    ),
    # a lazy grammar from the tools section; each argument any text up to its closer
    "kimi-k3-calls": (
        KIMI_K3,
        {"tools": [*TOOLS, PING], "tool_choice": "auto", "parallel_tool_calls": True},
    ),
    # the whole message when a call is required (the think section's body is then content)
    "kimi-k3-required-call-no-reasoning": (
        KIMI_K3,
        {
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "reasoning_format": "none",
        },
    ),
    # lazy: its root is the calls (any number), though the reply allows one call only
    "functionary-v32-one-call": (
        FUNCTIONARY_V32,
        {"tools": [*TOOLS, PING], "tool_choice": "auto", "parallel_tool_calls": False},
    ),
    # eager: content then calls, or calls alone
    "functionary-v32-required-parallel-calls": (
        FUNCTIONARY_V32,
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grammar_is_llama_cpps(name: str) -> None:
    source, options = CASES[name]
    grammar = Codec(source).prepare(HI, **options).grammar
    assert grammar is not None
    assert normalize(grammar.gbnf) == recorded(name)
