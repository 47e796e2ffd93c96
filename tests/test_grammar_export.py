"""Issue 9 (constraints), the exports: a request's grammar for llguidance (Lark), xgrammar
(structural tags) and the request fields of llama.cpp's server, vLLM and SGLang.

The Lark export is judged by llguidance itself (``tests/llguidance_judge.py``, over a byte
vocabulary) against llama.cpp's own grammar engine: the verdicts below (accept, reject,
incomplete) are what llama.cpp's engine gave on the same GBNF and texts (a whole grammar fed the
generation prompt first, a lazy one the text from its first trigger on, and a text without a
trigger left free), recorded with ``dev/grammar_export/compare.py`` and the chat oracle. The
GBNF itself is never judged by llguidance's GBNF import (it reads literal-only rules as greedy
lexemes and rejects text llama.cpp accepts).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec
from chatcodec.errors import GrammarError
from chatcodec.grammar.constraint import Grammar, Trigger
from chatcodec.grammar.gbnf import after, parse_gbnf, reachable, write_gbnf
from chatcodec.reply import Turn

from ._reply_oracle import PARSE_CASES, corpus_cases, per_case, prepare_request
from ._requests import ANSWER_REQUIRED, HI, QWEN3_CODER, QWEN35, WEATHER_TIME, json_schema
from .conftest import ROOT, read_jsonl
from .llguidance_judge import lark_verdicts

RECORDED = ROOT / "tests" / "data" / "grammar_export.jsonl"
TOOLS = WEATHER_TIME
RESPONSE_FORMAT = json_schema(ANSWER_REQUIRED)


def _call(name: str, **args: str) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


PARIS = _call("get_weather", city="Paris")
# request name -> (template, prepare options, [(reply, llama.cpp's verdict)])
CASES: dict[str, tuple[str, dict[str, Any], list[tuple[str, str]]]] = {
    "auto": (
        QWEN3_CODER,
        {"tools": TOOLS},
        [
            ("Just text, no call.", "accept"),
            ("Let me look." + PARIS, "accept"),
            (_call("get_weather", city="Paris", days="3"), "accept"),
            (_call("get_weather", city="Paris", days="three"), "reject"),
            (_call("get_time"), "accept"),
            ("<tool_call>\n<function=get_news>\n</function>\n</tool_call>", "reject"),
            (PARIS[:-30], "incomplete"),
            (PARIS + "\nAnything after the call", "reject"),
            # parallel_tool_calls is false unless asked for: one call
            (PARIS + "\n" + _call("get_time"), "reject"),
            # the bare function opener is a trigger too
            ("x<function=get_time>\n</function>\n</tool_call>", "accept"),
            # a trigger's first characters, then text: still free text
            ("<tool_cal x", "accept"),
            ("<function=get_tim", "accept"),
        ],
    ),
    "required-one": (
        QWEN3_CODER,
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False},
        [
            (PARIS, "accept"),
            ("I will call it. " + PARIS, "accept"),
            (PARIS + "\n" + _call("get_time"), "reject"),
            ("Hello", "incomplete"),
            ("<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", "reject"),
            (_call("get_weather", city="Paris", days="-12"), "accept"),
            (_call("get_weather", city="Paris", days="1.5"), "reject"),
        ],
    ),
    "thinking-required": (
        QWEN35,
        {"tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True},
        [
            ("<think>\nhm\n</think>\n\n" + PARIS, "accept"),
            ("<think>\nhm\n</think>\n\n" + PARIS + "\n" + _call("get_time"), "accept"),
            ("<think>\nhm", "incomplete"),
            (PARIS, "accept"),
        ],
    ),
    "response-format": (
        QWEN3_CODER,
        {"response_format": RESPONSE_FORMAT},
        [
            ('{"answer": "yes"}', "accept"),
            ('{"answer": 1}', "reject"),
            ('{"answer": "y', "incomplete"),
            ('{"answer": "yes"} and more', "reject"),
            ("{}", "reject"),
            ('\n{ "answer" : "a \\"quoted\\" word" }', "accept"),
        ],
    ),
}


def turn_for(name: str) -> Turn:
    template, options, _ = CASES[name]
    return Codec(template, eos_token="<|im_end|>").prepare(HI, **options)


@pytest.mark.parametrize("name", list(CASES))
def test_llguidance_runs_the_lark_export_as_llama_cpp_runs_the_gbnf(name: str) -> None:
    grammar = turn_for(name).grammar
    assert grammar is not None
    texts = [text for text, _ in CASES[name][2]]
    assert lark_verdicts(grammar.to_lark(), texts) == [verdict for _, verdict in CASES[name][2]]


@pytest.mark.parametrize("name", list(CASES))
def test_the_expected_verdicts_are_llama_cpps(name: str, tiny_llama: Any) -> None:
    grammar = turn_for(name).grammar
    assert grammar is not None
    texts = [text for text, _ in CASES[name][2]]
    verdicts = [_llama_cpp_verdict(tiny_llama, grammar, text) for text in texts]
    assert verdicts == [verdict for _, verdict in CASES[name][2]]


def _recorded() -> list[dict[str, Any]]:
    return read_jsonl(RECORDED)


def _grammar(entry: dict[str, Any]) -> Grammar:
    return Grammar(
        entry["grammar"],
        entry["lazy"],
        tuple(Trigger(kind, value) for kind, value in entry["triggers"]),
        generation_prompt=entry["generation_prompt"],
    )


@pytest.mark.parametrize("entry", _recorded(), ids=lambda entry: entry["id"])
def test_lark_of_llama_cpp_grammars_gives_llama_cpp_verdicts(entry: dict[str, Any]) -> None:
    """llama.cpp's own grammars (two per handler of the parse corpus), exported to Lark: the
    corpus replies and their mutations get llama.cpp's verdicts from llguidance."""
    verdicts = lark_verdicts(_grammar(entry).to_lark(), entry["texts"])
    wrong = [
        (text, want, got)
        for text, want, got in zip(entry["texts"], entry["verdicts"], verdicts, strict=True)
        if want != got
    ]
    assert not wrong


@pytest.mark.parametrize("name", ["auto", "required-one", "thinking-required"])
def test_preserved_tokens_kept_special_are_named_in_lark(name: str) -> None:
    """With a tokenizer that keeps <tool_call> and </tool_call> as special tokens (llguidance
    then never reads them as text), the Lark names them and the verdicts stay llama.cpp's."""
    grammar = turn_for(name).grammar
    assert grammar is not None
    special = grammar.preserved_tokens
    lark = grammar.to_lark(special)
    assert "<tool_call>" in lark and '"<" "t" "o" "o" "l"' not in lark.split("start:")[1]
    texts = [text for text, _ in CASES[name][2]]
    assert lark_verdicts(lark, texts, special) == [verdict for _, verdict in CASES[name][2]]
    with pytest.raises(GrammarError, match="cannot name"):
        grammar.to_lark(["[TOOL_CALLS]"])


def test_one_lexeme_per_character_keeps_llguidance_from_splitting_text_greedily() -> None:
    """llama.cpp's engine gives the same verdicts on this GBNF (the oracle's ``accept``)."""
    # as whole lexemes, "ab" would take "abc"'s first two characters and "d" would never come
    grammar = Grammar('root ::= "ab" "d" | "a" "bc"\n')
    assert lark_verdicts(grammar.to_lark(), ["abc", "abd", "ab", "abx"]) == [
        "accept",
        "accept",
        "incomplete",
        "reject",
    ]


def test_lark_names_characters_and_lazy_branches() -> None:
    """Hand-made grammars; the verdicts are llama.cpp's engine's on the same GBNF (the oracle's
    ``accept``, a lazy grammar fed from its first trigger on)."""
    # capitals and a rule named start keep apart in Lark (lowercase parser rules only)
    named = Grammar('root ::= Point start\nPoint ::= "é" [^"\\\\] "\\n"\nstart ::= [😀-😂]+\n')
    lark = named.to_lark()
    assert "\nstart: root\n" in lark and "g_start:" in lark and "_point:" in lark
    assert lark_verdicts(lark, ["éx\n😁😀", "é\\\n😀", "éx\n", "ex\n😀"]) == [
        "accept",
        "reject",
        "incomplete",
        "reject",
    ]
    # a trigger no text of the grammar starts with leaves only the free text before it
    lazy = Grammar(
        'root ::= "<call>" [0-9]+\n',
        lazy=True,
        triggers=(Trigger("word", "<call>"), Trigger("word", "<x>")),
    )
    assert lark_verdicts(lazy.to_lark(), ["a <call>12", "a <call>b", "a <x>", "a <x"]) == [
        "accept",
        "reject",
        "reject",
        "accept",
    ]


def test_a_whole_grammar_is_cut_after_the_generation_prompt() -> None:
    grammar = turn_for("response-format").grammar
    assert grammar is not None and not grammar.lazy
    assert grammar.generation_prompt == "<|im_start|>assistant\n"
    assert grammar.gbnf.count("<|im_start|>assistant\\n") == 1
    output = grammar.output_gbnf()
    assert "<|im_start|>" not in output
    assert output.startswith("root ::= ")
    # the cut grammar is GBNF again, and cutting nothing changes no rule
    assert parse_gbnf(output) == after(parse_gbnf(output), "")
    with pytest.raises(GrammarError, match="generation prompt"):
        Grammar(grammar.gbnf, generation_prompt="<|im_start|>user\n").output_gbnf()


def test_gbnf_reads_back_what_it_writes() -> None:
    for name in CASES:
        grammar = turn_for(name).grammar
        assert grammar is not None
        rules = parse_gbnf(grammar.gbnf)
        again = parse_gbnf(write_gbnf(rules))
        assert parse_gbnf(write_gbnf(again)) == again
        assert set(again) == set(reachable(rules))  # llama.cpp writes some unused rules too
    with pytest.raises(GrammarError, match="undefined rule"):
        parse_gbnf("root ::= missing\n")
    with pytest.raises(GrammarError, match="no root"):
        parse_gbnf('x ::= "a"\n')


def test_structural_tag_of_a_lazy_grammar_is_triggered_by_its_words() -> None:
    grammar = turn_for("auto").grammar
    assert grammar is not None and grammar.lazy
    tag = grammar.to_structural_tag()
    assert tag["type"] == "structural_tag"
    fmt = tag["format"]
    words = ["<tool_call>", "<function=get_weather>", "<function=get_time>"]
    assert (fmt["type"], fmt["triggers"], fmt["at_least_one"], fmt["stop_after_first"]) == (
        "triggered_tags",
        words,
        False,
        True,
    )
    assert [t["begin"] for t in fmt["tags"]] == words
    assert all(t["type"] == "tag" and t["end"] == "" for t in fmt["tags"])
    # each tag's grammar is what follows its trigger: after <tool_call>, its newline
    rest = parse_gbnf(fmt["tags"][0]["content"]["grammar"])
    assert after(rest, "\n<function=get_time>\n</function>\n</tool_call>") is not None
    assert after(rest, "<function=") is None
    time_rest = parse_gbnf(fmt["tags"][2]["content"]["grammar"])
    assert after(time_rest, "\n</function>\n</tool_call>") is not None


def test_structural_tag_of_a_whole_grammar_is_its_grammar() -> None:
    grammar = turn_for("required-one").grammar
    assert grammar is not None
    assert grammar.to_structural_tag() == {
        "type": "structural_tag",
        "format": {"type": "grammar", "grammar": grammar.output_gbnf()},
    }


def test_request_fields_of_each_engine() -> None:
    lazy = turn_for("auto").grammar
    whole = turn_for("required-one").grammar
    assert lazy is not None and whole is not None
    server = lazy.llama_server_fields()
    assert server == {
        "grammar": lazy.gbnf,
        "grammar_lazy": True,
        "grammar_triggers": [{"type": 1, "value": t.value} for t in lazy.triggers],
        "preserved_tokens": ["<tool_call>", "</tool_call>"],
    }
    assert whole.llama_server_fields()["grammar"] == whole.output_gbnf()
    assert whole.llama_server_fields()["grammar_triggers"] == []
    vllm = lazy.vllm_fields()
    assert list(vllm) == ["structured_outputs"]
    assert json.loads(vllm["structured_outputs"]["structural_tag"]) == lazy.to_structural_tag()
    assert whole.vllm_fields() == {"structured_outputs": {"grammar": whole.output_gbnf()}}
    assert not any(key.startswith("guided_") for key in json.dumps(vllm))
    assert json.loads(lazy.sglang_fields()["structural_tag"]) == lazy.to_structural_tag()
    assert whole.sglang_fields() == {"ebnf": whole.output_gbnf()}
    # extra stops go with every engine's fields
    ling = Grammar(
        whole.gbnf, additional_stops=("<|role_end|>",), generation_prompt=whole.generation_prompt
    )
    for fields in (ling.llama_server_fields(), ling.vllm_fields(), ling.sglang_fields()):
        assert fields["stop"] == ["<|role_end|>"]


def test_a_grammar_woken_by_a_regex_is_not_exported() -> None:
    grammar = Grammar('root ::= "x"\n', lazy=True, triggers=(Trigger("pattern", ">>>(?!all)"),))
    for export in (grammar.to_lark, grammar.to_structural_tag, grammar.vllm_fields):
        with pytest.raises(GrammarError, match="regex"):
            export()
    # llama.cpp's server takes it as it is
    assert grammar.llama_server_fields()["grammar_triggers"] == [{"type": 2, "value": ">>>(?!all)"}]


def test_xgrammar_compiles_the_structural_tags() -> None:
    """Optional (xgrammar imports torch, so it is no dependency of the project): run when
    xgrammar is installed."""
    xgrammar = pytest.importorskip("xgrammar")
    for name in CASES:
        grammar = turn_for(name).grammar
        assert grammar is not None
        xgrammar.Grammar.from_structural_tag(json.dumps(grammar.to_structural_tag()))
        if not grammar.lazy:
            xgrammar.Grammar.from_ebnf(grammar.output_gbnf())


def _family_cases() -> list[dict[str, Any]]:
    """Per reply family of the parse corpus, its first request with a lazy grammar and its
    first with a whole one."""
    chosen: dict[tuple[str, bool], dict[str, Any]] = {}
    for case in corpus_cases():
        setup = case["llama_cpp"]
        if setup and setup["grammar"]:
            chosen.setdefault((setup["handler"], setup["grammar_lazy"]), case)
    return list(chosen.values())


def _mutated(case: dict[str, Any]) -> list[str]:
    texts: list[str] = []
    names = [t["function"]["name"] for t in case.get("tools") or [] if "function" in t]
    for output in case["outputs"]:
        text = output["text"]
        for mutated in (text, "Sure. " + text, text + " trailing", text + text, text[:-7]):
            texts.append(mutated)
        if names and names[0] in text:
            texts.append(text.replace(names[0], "not_a_declared_tool", 1))
    return list(dict.fromkeys(texts))


def _llama_cpp_verdict(engine: Any, grammar: Grammar, text: str) -> str:
    """llama.cpp's verdict as its sampler runs the grammar: a whole one fed the generation
    prompt first; a lazy one fed the text from its first trigger on (free before it)."""
    if not grammar.lazy:
        return str(engine.verdict(grammar.gbnf, text, grammar.generation_prompt))
    starts = [text.find(t.value) for t in grammar.triggers if t.value in text]
    return str(engine.verdict(grammar.gbnf, text[min(starts) :])) if starts else "accept"


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), _family_cases, lambda case: case["id"])
)
def test_lark_of_every_family_grammar_agrees_with_llama_cpp(
    case: dict[str, Any], tiny_llama: Any
) -> None:
    """The grammar chatcodec builds for a corpus request of each family, exported to Lark:
    llguidance's verdicts on the corpus replies and their mutations are llama.cpp's, judged live
    by llama.cpp's grammar engine (tests/_llama.py)."""
    grammar = prepare_request(case).grammar
    assert grammar is not None
    if grammar.lazy and any(t.type.startswith("pattern") for t in grammar.triggers):
        with pytest.raises(GrammarError, match="regex"):
            grammar.to_lark()
        return
    texts = _mutated(case)
    expected = [_llama_cpp_verdict(tiny_llama, grammar, text) for text in texts]
    assert lark_verdicts(grammar.to_lark(), texts) == expected
