"""Issue 9 (constraints), the request's sampler setup: whether llama.cpp sets a grammar, and its
lazy flag, triggers, preserved tokens and additional stops (``turn.format.constraint``).

One test per case of the parse corpus llama.cpp set up (``pytest -k '<case id>]'``), then
hand-written checks that run without ../shared: their expectations are what llama.cpp's oracle
(the corpus' build, commit 0c1e570) gave for the same template and request.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec, load
from chatcodec.reply import Turn
from chatcodec.reply.constraint import Constraint, Trigger

from ._reply_oracle import PARSE_CASES, corpus_cases, per_case, prepare_request
from ._requests import ANSWER, CHATML, CITY_TIME, HI, QWEN3_CODER, QWEN35, json_schema
from .conftest import ROOT

CHECKPOINT = ROOT / "examples" / "chatml-tiny"
TOOLS = CITY_TIME
RESPONSE_FORMAT = json_schema(ANSWER)
# the markers in the leading comment pick llama.cpp's handler
LING3 = "{#- <role>ASSISTANT</role> <arg_key> -#}" + CHATML
PLAIN = (
    "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _set_up_cases() -> list[dict[str, Any]]:
    return [case for case in corpus_cases() if case["llama_cpp"] is not None]


def _fields(constraint: Constraint) -> dict[str, Any]:
    return {
        "grammar": constraint.grammar,
        "lazy": constraint.lazy,
        "triggers": [(t.type, t.value) for t in constraint.triggers],
        "preserved_tokens": list(constraint.preserved_tokens),
        "additional_stops": list(constraint.additional_stops),
    }


def _llama_cpp_fields(setup: dict[str, Any]) -> dict[str, Any]:
    return {
        "grammar": setup["grammar"] != "",
        "lazy": setup["grammar_lazy"],
        "triggers": [(t["type"], t["value"]) for t in setup["grammar_triggers"]],
        "preserved_tokens": setup["preserved_tokens"],
        "additional_stops": setup["additional_stops"],
    }


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), _set_up_cases, lambda case: case["id"])
)
def test_constraint_matches_llama_cpp(case: dict[str, Any]) -> None:
    turn = prepare_request(case)
    assert _fields(turn.format.constraint) == _llama_cpp_fields(case["llama_cpp"])


# ------------------------------------------------------------------ without ../shared


def _prepare(codec: Codec, **options: Any) -> Turn:
    return codec.prepare(HI, **options)


def test_chatml_tiny_tools_get_a_lazy_grammar_woken_at_the_call_marker() -> None:
    codec = load(CHECKPOINT)
    preserved = ("<think>", "</think>", "<tool_call>", "</tool_call>")
    plain = _prepare(codec).format.constraint
    assert plain == Constraint(preserved_tokens=preserved)
    auto = _prepare(codec, tools=TOOLS).format.constraint
    # the auto parser's trigger is the call's start marker as the template writes it
    assert auto == Constraint(True, True, (Trigger("word", "<tool_call>\n"),), preserved)
    required = _prepare(codec, tools=TOOLS, tool_choice="required").format.constraint
    assert required == Constraint(True, False, (), preserved)
    assert _prepare(codec, tools=TOOLS, tool_choice="none").format.constraint == plain


def test_a_response_format_gets_an_eager_grammar_from_the_auto_parser() -> None:
    codec = load(CHECKPOINT)
    preserved = ("<think>", "</think>", "<tool_call>", "</tool_call>")
    for tools in (None, TOOLS):
        turn = _prepare(codec, tools=tools, response_format=RESPONSE_FORMAT)
        assert turn.format.constraint == Constraint(True, False, (), preserved)
    # even a template without tool calls or reasoning gets one (no tokens to preserve)
    plain = Codec(PLAIN)
    assert _prepare(plain, tools=TOOLS).format.constraint == Constraint()
    turn = _prepare(plain, tools=TOOLS, response_format=RESPONSE_FORMAT)
    assert turn.format.constraint == Constraint(grammar=True)


def test_qwen3_coder_also_wakes_at_each_bare_function_opener() -> None:
    codec = Codec(QWEN3_CODER, eos_token="<|im_end|>")
    triggers = tuple(
        Trigger("word", w) for w in ("<tool_call>", "<function=get_weather>", "<function=get_time>")
    )
    preserved = ("<tool_call>", "</tool_call>")
    assert _prepare(codec, tools=TOOLS).format.constraint == Constraint(
        True, True, triggers, preserved
    )
    # Qwen3-Coder's grammar stays lazy beside a response format when tools are offered
    turn = _prepare(codec, tools=TOOLS, response_format=RESPONSE_FORMAT)
    assert turn.format.constraint == Constraint(True, True, triggers, preserved)
    turn = _prepare(codec, response_format=RESPONSE_FORMAT)
    assert turn.format.constraint == Constraint(True, False, (), preserved)
    thinking = Codec(QWEN35, eos_token="<|im_end|>")
    assert _prepare(thinking, tools=TOOLS).format.constraint == Constraint(
        True,
        True,
        (Trigger("word", "<tool_call>"),),
        ("<tool_call>", "</tool_call>", "<think>", "</think>"),
    )


def test_ling3_keeps_its_trigger_when_calls_are_required_and_stops_at_role_end() -> None:
    codec = Codec(LING3, eos_token="<|im_end|>")
    preserved = (
        *("<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>"),
        *("<arg_value>", "</arg_value>", "<|role_end|>"),
    )
    stops = ("<|role_end|>",)
    trigger = (Trigger("word", "<tool_call>"),)
    assert _prepare(codec).format.constraint == Constraint(False, False, (), preserved, stops)
    required = _prepare(codec, tools=TOOLS, tool_choice="required").format.constraint
    assert required == Constraint(True, False, trigger, preserved, stops)
    # Ling 3 builds no response-format grammar: only the calls are constrained
    alone = _prepare(codec, response_format=RESPONSE_FORMAT).format.constraint
    assert alone == Constraint(False, False, (), preserved, stops)
    both = _prepare(codec, tools=TOOLS, response_format=RESPONSE_FORMAT).format.constraint
    assert both == Constraint(True, True, trigger, preserved, stops)
