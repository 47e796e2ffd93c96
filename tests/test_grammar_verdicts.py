"""Verdict parity with llama.cpp's reply grammars, in the suite: on a sample of the parse
corpus (every SAMPLE_STEP-th case of each handler that has a grammar), chatcodec's grammar and
llama.cpp's recorded one give the same verdict on the case's outputs and on mutations of its
reply (tests/_grammar_replies.py), each judged on what its sampler would see, by llama.cpp's
own grammar engine (llama-cpp-python over tests/_llama.py's byte vocabulary; skipped without
it). ``dev/grammar_verdicts.py`` runs the whole corpus
through the oracle."""

from __future__ import annotations

from typing import Any

import pytest

from ._grammar_replies import (
    call_openers,
    judged_text,
    recorded_grammar,
    replies,
    thinking_tags,
)
from ._reply_oracle import PARSE_CASES, corpus_cases, per_case, prepare_request

SAMPLE_STEP = 10


def _sample() -> list[dict[str, Any]]:
    seen: dict[str, int] = {}
    out = []
    for case in corpus_cases():
        setup = case["llama_cpp"]
        if not setup or not setup["grammar"]:
            continue
        index = seen[setup["handler"]] = seen.get(setup["handler"], -1) + 1
        if index % SAMPLE_STEP == 0:
            out.append(case)
    return out


def _verdict(judge: Any, gbnf: str, text: str | None) -> str:
    return "free" if text is None else judge.verdict(gbnf, text)


@pytest.mark.parametrize("case", per_case(PARSE_CASES.exists(), _sample, lambda c: c["id"]))
def test_same_verdicts_as_llama_cpps_grammar(case: dict[str, Any], tiny_llama: Any) -> None:
    setup = case["llama_cpp"]
    turn = prepare_request(case)
    ours = turn.grammar
    assert ours is not None
    llama = recorded_grammar(setup)
    assert llama is not None
    thinking = thinking_tags(setup)
    differences = []
    for reply in replies(case, call_openers(case)):
        theirs = judged_text(llama, setup["generation_prompt"], reply.text, thinking)
        mine = judged_text(ours, turn.generation_prompt, reply.text, thinking)
        want, got = _verdict(tiny_llama, llama.gbnf, theirs), _verdict(tiny_llama, ours.gbnf, mine)
        if want != got:
            differences.append(f"{reply.kind}: llama.cpp {want}, chatcodec {got}: {reply.text!r}")
    assert not differences, "\n".join(differences)
