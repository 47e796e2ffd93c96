"""Parse parity: every case of the llama.cpp parse corpus, finished and partial outputs."""

from __future__ import annotations

import json
from collections import Counter

from chatcodec.reply.cli import batch_result

from ._reply_oracle import load_compare
from .conftest import read_jsonl, shared_path

# Deliberate differences from llama.cpp (docs/differences.md): case id -> output indexes.
DOCUMENTED_DIFFERENCES: dict[str, set[int]] = {}


def _replay() -> tuple[Counter[tuple[str, bool]], list[str]]:
    compare = load_compare()
    cases = read_jsonl(shared_path("oracle", "parse", "cases.jsonl"))
    tally: Counter[tuple[str, bool]] = Counter()
    qwen_failures: list[str] = []
    for case in cases:
        handler = (case["llama_cpp"] or {}).get("handler", "(request failed)")
        results = batch_result(case)["results"]
        assert len(results) == len(case["outputs"])
        for i, (output, result) in enumerate(zip(case["outputs"], results, strict=True)):
            why = compare.compare_output(output, result)
            if why is not None and i in DOCUMENTED_DIFFERENCES.get(case["id"], set()):
                why = None
            tally[(handler, why is None)] += 1
            if why is not None and handler == "Qwen3-Coder":
                qwen_failures.append(f"{case['id']} [{i} {output['kind']}]: {why}")
    return tally, qwen_failures


def test_corpus_replay() -> None:
    tally, qwen_failures = _replay()
    handlers = sorted({h for h, _ in tally})
    report = {h: f"{tally[(h, True)]}/{tally[(h, True)] + tally[(h, False)]}" for h in handlers}
    print("\nparse parity by llama.cpp handler:\n" + json.dumps(report, indent=1))
    assert tally[("Qwen3-Coder", True)] == 12724, "the Qwen3-Coder corpus is not the one expected"
    assert not qwen_failures, "\n".join(qwen_failures[:20])
