"""Invariant 2: every case of the llama.cpp parse corpus, finished and partial outputs.

One test per corpus case, named by its id: ``pytest -k '<case id>]'`` reruns that case alone
(the closing bracket keeps an id from also selecting the longer ids it begins).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ._reply_oracle import PARSE_CASES, batch_result, corpus_cases, load_compare, per_case

# Deliberate differences from llama.cpp in the *message* (docs/differences.md): case id ->
# output indexes. None today: every difference chatcodec has is in what surrounds the message
# (dropped-text diagnostics, when a streamed call is announced), never in the message.
DOCUMENTED_DIFFERENCES: dict[str, set[int]] = {}
# outputs per llama.cpp handler in the corpus (the one run over it: every one must match)
OUTPUTS_PER_HANDLER = {
    "autoparser": 19266,
    "Qwen3-Coder": 12724,
    "DeepSeek V3.2/V4": 1247,
    "Kimi K2 Thinking": 1149,
    "Gemma4 (inferred from format)": 765,
    "Ministral/Magistral Large 3": 757,
    "LFM2.5": 742,
    "GPT-OSS": 426,
    "Ling 3.0 (Bailing V3)": 423,
    "LFM2": 420,
    "Kimi K3": 410,
    "Muse Glimmer": 410,
    "Cohere2 MoE": 377,
    "Functionary v3.2": 359,
    "MiniCPM5": 359,
    "MiniMax-M3": 347,
    "GigaChatV3": 304,
    "(request failed)": 26,
}
CASES = 6338
OUTPUTS = 40511


def _handler(case: dict[str, Any]) -> str:
    return str((case["llama_cpp"] or {}).get("handler", "(request failed)"))


def test_the_parse_corpus_is_the_one_expected() -> None:
    cases = corpus_cases()
    assert len(cases) == CASES
    assert len({case["id"] for case in cases}) == CASES, "case ids must name one case each"
    outputs: Counter[str] = Counter()
    for case in cases:
        outputs[_handler(case)] += len(case["outputs"])
    assert sum(outputs.values()) == OUTPUTS
    assert dict(outputs) == OUTPUTS_PER_HANDLER


@pytest.mark.parametrize(
    "case", per_case(PARSE_CASES.exists(), corpus_cases, lambda case: case["id"])
)
def test_parse_case_matches_llama_cpp(case: dict[str, Any]) -> None:
    compare = load_compare()
    results = batch_result(case)["results"]
    assert len(results) == len(case["outputs"])
    documented = DOCUMENTED_DIFFERENCES.get(case["id"], set())
    failures = []
    for i, (output, result) in enumerate(zip(case["outputs"], results, strict=True)):
        why = compare.compare_output(output, result)
        if why is not None and i not in documented:
            failures.append(f"[{i} {output['kind']}] {why}")
    assert not failures, f"{_handler(case)}: {len(failures)} outputs differ:\n" + "\n".join(
        failures[:20]
    )
