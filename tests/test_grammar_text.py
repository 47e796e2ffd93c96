"""Issue 9 (constraints): each request's grammar text is llama.cpp's, rule for rule.

One test per case of the parse corpus llama.cpp set up (``pytest -k '<case id>]'``): the GBNF of
``turn.grammar`` equals the grammar llama.cpp set for the request (``llama_cpp.grammar``), up to
the numbers llama.cpp gives its automaton rules (tests/_grammar_compare.py). Then checks that run
without ../shared, against grammars llama.cpp's oracle (commit 0c1e570) gave for the same
template and request (tests/data/grammar/).
"""

from __future__ import annotations

from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.grammar import rules as g
from chatcodec.grammar.constraint import Trigger

from ._grammar_compare import RECORDED, normalize, recorded
from ._reply_oracle import PARSE_CASES, corpus_cases, per_case, prepare_request
from ._requests import HI, QWEN3_CODER
from .test_grammar_request import RESPONSE_FORMAT, TOOLS


def _set_up_cases() -> list[dict[str, Any]]:
    return [case for case in corpus_cases() if case["llama_cpp"] is not None]


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), _set_up_cases, lambda case: case["id"])
)
def test_grammar_is_llama_cpps(case: dict[str, Any]) -> None:
    turn = prepare_request(case)
    assert turn.format.policy == "reference"  # llama.cpp's grammar, byte for byte
    grammar = turn.grammar
    got = grammar.gbnf if grammar is not None else ""
    assert normalize(got) == normalize(case["llama_cpp"]["grammar"])


# ------------------------------------------------------------------ without ../shared


def test_qwen3_coder_required_single_call_grammar_is_llama_cpps() -> None:
    codec = Codec(QWEN3_CODER, eos_token="<|im_end|>")
    turn = codec.prepare(HI, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert turn.grammar is not None and not turn.grammar.lazy
    # the root starts with the generation prompt the sampler is fed first
    assert normalize(turn.grammar.gbnf) == recorded("qwen3_coder_required")


def test_qwen3_coder_auto_grammar_is_lazy_and_llama_cpps() -> None:
    codec = Codec(QWEN3_CODER, eos_token="<|im_end|>")
    turn = codec.prepare(HI, tools=TOOLS, parallel_tool_calls=True)
    grammar = turn.grammar
    assert grammar is not None and grammar.lazy
    assert grammar.triggers == (
        Trigger("word", "<tool_call>"),
        Trigger("word", "<function=get_weather>"),
        Trigger("word", "<function=get_time>"),
    )
    assert normalize(grammar.gbnf) == recorded("qwen3_coder_auto")


def test_qwen3_coder_response_format_grammar_is_llama_cpps() -> None:
    codec = Codec(QWEN3_CODER, eos_token="<|im_end|>")
    turn = codec.prepare(HI, response_format=RESPONSE_FORMAT)
    assert turn.grammar is not None and not turn.grammar.lazy
    assert turn.grammar.gbnf == (RECORDED / "qwen3_coder_response_format.gbnf").read_text(
        encoding="utf-8"
    )


def test_no_grammar_without_tools_or_response_format() -> None:
    codec = Codec(QWEN3_CODER, eos_token="<|im_end|>")
    assert codec.prepare(HI).grammar is None
    assert codec.prepare(HI, tools=TOOLS, tool_choice="none").grammar is None


# ------------------------------------------------------------------ the combinators


def _rules_text(expr: g.Expr) -> str:
    return g.Rules().gbnf(expr, lazy=False)


def test_sequences_and_choices_flatten_but_a_tag_keeps_its_group() -> None:
    flat = g.seq("a", g.seq("b", "c")) | g.choice("d", "e")
    assert _rules_text(flat).splitlines()[0] == 'root ::= "a" "b" "c" | "d" | "e"'
    grouped = g.seq("a", g.tag(g.seq("b", "c"))) | g.tag(g.choice("d", "e"))
    assert _rules_text(grouped).splitlines()[0] == 'root ::= "a" ("b" "c") | ("d" | "e")'


def test_lookaheads_and_empty_items_write_nothing() -> None:
    text = _rules_text(g.seq("a", g.nothing(), g.optional(g.seq("b", g.space()))))
    assert text.splitlines()[0] == 'root ::= "a" ("b" space)?'
    assert _rules_text(g.repeat("x", 2, 2)).splitlines()[0] == 'root ::= "x"{2}'
    assert _rules_text(g.repeat("x", 2, -1)).splitlines()[0] == 'root ::= "x"{2,}'


def test_until_is_an_exclusion_automaton_and_up_to_an_inclusion_one() -> None:
    excluding = _rules_text(g.until("ab")).splitlines()
    assert excluding[0] == "root ::= until-1"
    assert "until-1 ::= | [a] until-1-01 | [^a] until-1" in excluding
    # after "a": "a" again stays there, "b" would complete the delimiter so it has no move
    assert "until-1-01 ::= | [a] until-1-01 | [^ab] until-1" in excluding
    including = _rules_text(g.up_to("ab")).splitlines()
    assert "ac-1-01 ::= [b] | [a] ac-1-01 | [^ab] ac-1" in including
    assert _rules_text(g.until()).splitlines()[0] == "root ::= .*"


def test_a_raw_string_schema_keeps_its_child_and_a_rule_refers_to_itself() -> None:
    r = g.Rules()
    text = g.schema(g.lit("x"), "arg", {"type": "string"}, raw=True)
    assert r.gbnf(text, lazy=False).splitlines()[0] == 'root ::= "x"'
    number = g.schema(g.lit("x"), "arg", {"type": "integer"}, raw=True)
    assert "root ::= integer" in r.gbnf(number, lazy=False).splitlines()
    nested = r.rule("list", lambda: g.seq("[", g.optional(r.rule("list", lambda: g.lit("?"))), "]"))
    assert r.gbnf(nested, lazy=False).splitlines()[:2] == [
        'list ::= "[" list? "]"',
        "root ::= list",
    ]
