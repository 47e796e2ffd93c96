"""The tests' grammar judge (tests/_llama.py) against llama.cpp's own, on the parse corpus.

    python dev/verdict_parity.py [--texts 400] [--seed 0]

The tests judge GBNF with llama-cpp-python's grammar sampler over the tiny byte-vocabulary
model, feeding the text a token at a time; the oracle (../shared/tools/llamacpp-oracle, op
``accept``) runs llama.cpp's ``llama_grammar_accept_str`` on the whole text. This draws
``--texts`` texts from the corpus cases that have a grammar (llama.cpp's recorded
``llama_cpp.grammar`` with the outputs' texts, each also with trailing text and cut in half),
asks both and prints how often they agree. A whole grammar's text is preceded by the
generation prompt (the tests feed it as the prefix); a lazy grammar sees the text from its
first trigger word on. Exit status 1 when any verdict differs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from tests._llama import Engine, write_model  # noqa: E402


def _oracle() -> Any:
    spec = importlib.util.spec_from_file_location(
        "oracle", SHARED / "tools" / "llamacpp-oracle" / "oracle.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _from_trigger(setup: dict[str, Any], text: str) -> str:
    starts = [text.find(t["value"]) for t in setup["grammar_triggers"] if t["type"] == "word"]
    starts = [s for s in starts if s >= 0]
    return text[min(starts) :] if starts else text


def _texts(limit: int, seed: int) -> list[tuple[str, str, str]]:
    """(grammar, prefix, text) triples drawn from the corpus."""
    triples = []
    with (SHARED / "oracle" / "parse" / "cases.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            case = json.loads(line)
            setup = case["llama_cpp"]
            if not setup or not setup["grammar"]:
                continue
            prefix = "" if setup["grammar_lazy"] else setup["generation_prompt"]
            for output in case["outputs"]:
                text = output["text"]
                if setup["grammar_lazy"]:
                    text = _from_trigger(setup, text)
                for variant in (text, text + " and more", text[: len(text) // 2]):
                    triples.append((setup["grammar"], prefix, variant))
    unique = sorted(set(triples))
    random.Random(seed).shuffle(unique)
    return unique[:limit]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    triples = _texts(args.texts, args.seed)
    requests = [
        {"id": str(i), "op": "accept", "grammar": g, "texts": [p + t]}
        for i, (g, p, t) in enumerate(triples)
    ]
    start = time.perf_counter()
    theirs = [r["results"][0] for r in _oracle().run_batch(requests)]
    oracle_seconds = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        engine = Engine(write_model(Path(folder) / "tiny.gguf"))
        start = time.perf_counter()
        ours = [engine.verdict(g, t, p) for g, p, t in triples]
        seconds = time.perf_counter() - start
        engine.close()
    counts: dict[str, int] = {}
    differ = []
    for triple, a, b in zip(triples, ours, theirs, strict=True):
        counts[b] = counts.get(b, 0) + 1
        if a != b:
            differ.append((triple, a, b))
    grammars = len({g for g, _, _ in triples})
    print(f"{len(triples)} texts over {grammars} grammars; llama.cpp's verdicts: {counts}")
    print(f"agree: {len(triples) - len(differ)} of {len(triples)}")
    print(f"time: llama-cpp-python sampler {seconds:.2f}s, oracle process {oracle_seconds:.2f}s")
    for (_, prefix, text), a, b in differ[:10]:
        print(f"  differs: ours {a}, llama.cpp {b}: {(prefix + text)[:200]!r}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
