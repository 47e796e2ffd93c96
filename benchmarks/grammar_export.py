"""The grammar exports' cost, against llguidance compiling what they give.

    python benchmarks/grammar_export.py            # every distinct grammar of the parse corpus
    python benchmarks/grammar_export.py --limit 40

For each distinct grammar llama.cpp set in ../shared/oracle/parse/cases.jsonl (but the lazy
ones woken by a regex, which are not exported), in the same run: ``to_lark()`` made afresh (the
per-grammar cache bypassed) against llguidance compiling that Lark into a matcher
(``grammar_from_lark`` and ``LLMatcher`` over a byte vocabulary), and ``to_structural_tag()``
made afresh against the same llguidance compile. Prints the median, p10 and p90 of the
per-grammar ratios (chatcodec / llguidance) and the absolute medians. Needs llguidance (the
``dev`` extra) and the shared corpus.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import llguidance  # noqa: E402
from tests.llguidance_judge import byte_tokenizer  # noqa: E402

from chatcodec.grammar import export  # noqa: E402
from chatcodec.grammar.constraint import Grammar, Trigger  # noqa: E402

CASES = ROOT.parent / "shared" / "oracle" / "parse" / "cases.jsonl"


def grammars(limit: int | None) -> list[Grammar]:
    found: dict[str, Grammar] = {}
    for line in CASES.open(encoding="utf-8"):
        setup = json.loads(line)["llama_cpp"]
        if not setup or not setup["grammar"]:
            continue
        triggers = tuple(Trigger(t["type"], t["value"]) for t in setup["grammar_triggers"])
        if setup["grammar_lazy"] and any(t.type.startswith("pattern") for t in triggers):
            continue
        grammar = Grammar(
            setup["grammar"],
            setup["grammar_lazy"],
            triggers,
            generation_prompt=setup["generation_prompt"],
        )
        found.setdefault(
            json.dumps([grammar.gbnf, grammar.lazy, grammar.generation_prompt]), grammar
        )
    return list(found.values())[:limit]


def best(fn: Callable[[], Any], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def compile_lark(lark: str) -> None:
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    matcher = llguidance.LLMatcher(byte_tokenizer(), grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    def lark_fresh(grammar: Grammar) -> str:
        export.clear_cache()
        return grammar.to_lark()

    def tag_fresh(grammar: Grammar) -> dict[str, Any]:
        export.clear_cache()
        return grammar.to_structural_tag()

    rows: dict[str, list[tuple[float, float]]] = {"to_lark": [], "to_structural_tag": []}
    for grammar in grammars(args.limit):
        lark = lark_fresh(grammar)
        theirs = best(lambda lark=lark: compile_lark(lark), args.rounds)
        ours = best(lambda g=grammar: lark_fresh(g), args.rounds)
        rows["to_lark"].append((ours, theirs))
        tag = best(lambda g=grammar: tag_fresh(g), args.rounds)
        rows["to_structural_tag"].append((tag, theirs))
    print(f"{len(rows['to_lark'])} grammars; ratio = chatcodec / llguidance compile, same run")
    print(
        f"{'export':20} {'median':>7} {'p10':>6} {'p90':>6}   {'ours (median)':>14} {'llguidance':>11}"
    )
    for name, pairs in rows.items():
        ratios = sorted(o / t for o, t in pairs)
        median_ours = statistics.median(o for o, _ in pairs) * 1000
        median_theirs = statistics.median(t for _, t in pairs) * 1000
        p10, p90 = ratios[len(ratios) // 10], ratios[len(ratios) * 9 // 10]
        print(
            f"{name:20} {statistics.median(ratios):7.2f} {p10:6.2f} {p90:6.2f}   "
            f"{median_ours:11.1f} ms {median_theirs:8.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
