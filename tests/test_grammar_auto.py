"""Issue 9 (constraints): the auto parser's reply grammar is llama.cpp's, rule for rule.

The corpus-wide comparison is dev/grammar_text.py (every corpus request of the handler); these
run without ../shared. The expected texts in tests/data/grammar/auto_*.gbnf are what llama.cpp's
oracle (the corpus' build, commit 0c1e570, ../shared/tools/llamacpp-oracle) gave for the
templates and requests below; only the numbers of the automaton rules may differ.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec, load

from ._grammar_compare import normalize, recorded
from ._requests import ANSWER_REQUIRED, HI, WEATHER_UNIT_BARE_TIME, json_schema
from .conftest import ROOT

TOOLS = WEATHER_UNIT_BARE_TIME
REQUESTS: dict[str, dict[str, Any]] = {
    "auto": {"tools": TOOLS, "parallel_tool_calls": True},
    "required": {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
    "required_parallel_noreason": {
        "tools": TOOLS,
        "tool_choice": "required",
        "parallel_tool_calls": True,
        "reasoning_format": "none",
    },
    "response_format": {
        "tools": TOOLS,
        "response_format": json_schema(ANSWER_REQUIRED),
    },
}

# a ChatML body with a <think> thought; CALLS writes an assistant message's tool calls
BODY = """{%- for message in messages -%}
{%- if message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' -}}
{%- if message.reasoning_content -%}
{{- '<think>' + message.reasoning_content + '</think>' -}}
{%- endif -%}
{%- if message.content -%}{{- message.content -}}{%- endif -%}
CALLS
{{- '<|im_end|>\\n' -}}
{%- elif message.role == 'tool' -%}
{{- '<|im_start|>tool\\n' + message.content + '<|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if tools -%}
{{- '<|im_start|>tools\\n' -}}{%- for t in tools -%}{{- t | tojson -}}{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- endif -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}
"""
VALUE = "(v if v is string else v | tojson)"
CALLS = {
    # tagged arguments in per-call markers: <tool_call>NAME <arg_key>K</arg_key> <arg_value>V
    "tagged": "{%- for call in message.tool_calls or [] -%}"
    "{{- '<tool_call>' + call.function.name + '\\n' -}}"
    "{%- for k, v in call.function.arguments.items() -%}"
    "{{- '<arg_key>' + k + '</arg_key>\\n<arg_value>' + " + VALUE + " + '</arg_value>\\n' -}}"
    "{%- endfor -%}{{- '</tool_call>' -}}{%- endfor -%}",
    # tagged arguments in a section, no per-call markers: <invoke name="NAME"> <parameter ...>
    "section": "{%- if message.tool_calls -%}{{- '<calls>\\n' -}}"
    "{%- for call in message.tool_calls -%}"
    "{{- '<invoke name=\"' + call.function.name + '\">\\n' -}}"
    "{%- for k, v in call.function.arguments.items() -%}"
    "{{- '<parameter name=\"' + k + '\">' + " + VALUE + " + '</parameter>\\n' -}}"
    "{%- endfor -%}{{- '</invoke>\\n' -}}{%- endfor -%}{{- '</calls>' -}}{%- endif -%}",
    # JSON arguments after a tagged name: <function=NAME>{...}</function>
    "tag_json": "{%- for call in message.tool_calls or [] -%}"
    "{{- '<function=' + call.function.name + '>' + (call.function.arguments | tojson) -}}"
    "{{- '</function>' -}}{%- endfor -%}",
    # a JSON array of calls with ids after [TOOL_CALLS]
    "array": "{%- if message.tool_calls -%}{{- '[TOOL_CALLS][' -}}"
    "{%- for call in message.tool_calls -%}{%- if not loop.first -%}{{- ', ' -}}{%- endif -%}"
    '{{- \'{"name": "\' + call.function.name + \'", "arguments": \' -}}'
    "{{- (call.function.arguments | tojson) + ', \"id\": \"' + call.id + '\"}' -}}"
    "{%- endfor -%}{{- ']' -}}{%- endif -%}",
    # a JSON array of {"NAME": {...}} in a section
    "name_key": "{%- if message.tool_calls -%}{{- '<calls>[' -}}"
    "{%- for call in message.tool_calls -%}{%- if not loop.first -%}{{- ', ' -}}{%- endif -%}"
    "{{- '{\"' + call.function.name + '\": {\"args\": ' -}}"
    "{{- (call.function.arguments | tojson) + '}}' -}}"
    "{%- endfor -%}{{- ']</calls>' -}}{%- endif -%}",
}
CASES = [
    # the example checkpoint: JSON calls each in <tool_call>\n...</tool_call>, a thought
    ("chatml_tiny", "auto"),
    ("chatml_tiny", "required"),
    # a response format wins over the tools: its JSON value, fenced in ```json or bare
    ("chatml_tiny", "response_format"),
    ("tagged", "auto"),
    ("tagged", "required_parallel_noreason"),
    ("section", "required"),
    ("tag_json", "required"),
    ("array", "required"),
    ("name_key", "required"),
]


def _codec(shape: str) -> Codec:
    if shape == "chatml_tiny":
        return load(ROOT / "examples" / "chatml-tiny")
    return Codec(BODY.replace("CALLS", CALLS[shape]), eos_token="<|im_end|>")


@pytest.mark.parametrize(("shape", "request_name"), CASES)
def test_auto_parser_grammar_is_llama_cpps(shape: str, request_name: str) -> None:
    turn = _codec(shape).prepare(HI, **REQUESTS[request_name])
    assert turn.handler == "auto"
    assert turn.grammar is not None
    assert turn.grammar.lazy == (request_name == "auto")
    assert normalize(turn.grammar.gbnf) == recorded(f"auto_{shape}_{request_name}")


def test_auto_parser_sets_no_grammar_without_calls_or_a_response_format() -> None:
    codec = _codec("tagged")
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None
    # no start marker to wake a lazy grammar: llama.cpp sets none under auto
    assert _codec("tag_json").prepare(HI, tools=TOOLS).grammar is None
