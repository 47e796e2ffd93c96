"""Issue 9 (constraints): LFM2/LFM2.5's, Ling 3.0's and MiniCPM5's reply grammars are
llama.cpp's, rule for rule.

Runs without ../shared: tests/data/grammar_<family>.json holds hand-written requests (a ChatML
body whose leading comment picks the handler; for Ling 3.0 one template whose generation prompt
opens a thought and one whose does not) with the grammar llama.cpp's oracle (the corpus' build,
commit 0c1e570) set for each; its automaton rules (``until-N``, ``ac-N``) are renumbered as
chatcodec numbers them (by first use), which is the only freedom the grammar text has.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chatcodec import Codec

from ._requests import HI
from .conftest import ROOT

CASES: list[dict[str, Any]] = [
    case
    for family in ("lfm2", "ling3", "minicpm5")
    for case in json.loads(
        (ROOT / "tests" / "data" / f"grammar_{family}.json").read_text(encoding="utf-8")
    )
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['handler']}-{i}" for i, c in enumerate(CASES)])
def test_grammar_is_llama_cpps(case: dict[str, Any]) -> None:
    turn = Codec(case["template"], eos_token="<|im_end|>").prepare(HI, **case["options"])
    assert turn.format.handler == case["handler"]
    assert turn.grammar is not None
    assert turn.grammar.gbnf == case["grammar"]
