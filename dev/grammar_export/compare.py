"""Judge the Lark export with llguidance against llama.cpp's own grammar engine.

    python dev/grammar_export/compare.py                  # every grammar of the parse corpus
    python dev/grammar_export/compare.py --per-handler 3 --write tests/data/grammar_export.jsonl

For each distinct grammar llama.cpp set in ../shared/oracle/parse/cases.jsonl (its text, lazy
flag, triggers, generation prompt), the replies of the cases that have it and mutations of them
(content before the reply, trailing text, an undeclared tool's name, the reply twice, cut in
half) are judged twice: by llama.cpp's grammar engine (the chat oracle's ``accept`` op; a whole
grammar is fed the generation prompt then the reply, a lazy one the reply from its first trigger
on, and a reply without a trigger is free) and by llguidance running ``Grammar.to_lark()`` on the
whole reply. Verdicts: accept, reject, incomplete. Lazy grammars woken by a regex are skipped
(the export refuses them). A developer tool: it needs the oracle binary
(../shared/tools/llamacpp-oracle/build.sh) and llguidance; not run in CI. ``--write`` records
the grammars, texts and llama.cpp's verdicts for tests/test_grammar_export.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.llguidance_judge import lark_verdicts  # noqa: E402

from chatcodec.grammar.constraint import Grammar, Trigger  # noqa: E402

SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(SHARED / "tools" / "llamacpp-oracle"))
import oracle  # noqa: E402


def _grammar(setup: dict[str, Any]) -> Grammar:
    return Grammar(
        setup["grammar"],
        setup["grammar_lazy"],
        tuple(Trigger(t["type"], t["value"]) for t in setup["grammar_triggers"]),
        tuple(setup["preserved_tokens"]),
        tuple(setup["additional_stops"]),
        generation_prompt=setup["generation_prompt"],
    )


def _mutations(text: str, tools: list[str]) -> list[str]:
    out = [text, "Sure. " + text, text + " trailing", text + text, text[: len(text) // 2]]
    for name in tools[:1]:
        if name in text:
            out.append(text.replace(name, "not_a_declared_tool", 1))
    return out


def gather(per_handler: int | None) -> list[dict[str, Any]]:
    """One entry per distinct grammar: the grammar and the texts to judge."""
    groups: dict[str, dict[str, Any]] = {}
    for line in (SHARED / "oracle" / "parse" / "cases.jsonl").open(encoding="utf-8"):
        case = json.loads(line)
        setup = case["llama_cpp"]
        if not setup or not setup["grammar"]:
            continue
        regex = any(t["type"] in ("pattern", "pattern_full") for t in setup["grammar_triggers"])
        if setup["grammar_lazy"] and regex:
            continue
        key = json.dumps([setup[k] for k in ("grammar", "grammar_lazy", "grammar_triggers")])
        key += setup["generation_prompt"]
        entry = groups.setdefault(
            key,
            {
                "id": case["id"],
                "handler": setup["handler"],
                "grammar": setup["grammar"],
                "lazy": setup["grammar_lazy"],
                "triggers": [[t["type"], t["value"]] for t in setup["grammar_triggers"]],
                "generation_prompt": setup["generation_prompt"],
                "texts": [],
            },
        )
        tools = [t["function"]["name"] for t in case.get("tools") or [] if "function" in t]
        for output in case["outputs"]:
            if output["is_partial"]:
                continue
            for text in _mutations(output["text"], tools):
                if text not in entry["texts"]:
                    entry["texts"].append(text)
    entries = list(groups.values())
    if per_handler is not None:
        kept: Counter[str] = Counter()
        chosen = []
        for entry in entries:
            if kept[entry["handler"]] < per_handler:
                kept[entry["handler"]] += 1
                entry["texts"] = entry["texts"][:24]
                chosen.append(entry)
        entries = chosen
    return entries


def llama_cpp_verdicts(entries: list[dict[str, Any]]) -> None:
    """Fill each entry's ``verdicts`` with llama.cpp's grammar engine's."""
    requests, where = [], []
    for k, entry in enumerate(entries):
        words = [v for _, v in entry["triggers"]]
        fed, free = [], []
        for i, text in enumerate(entry["texts"]):
            if entry["lazy"]:
                starts = [text.find(w) for w in words if w in text]
                if not starts:
                    free.append(i)
                    continue
                fed.append((i, text[min(starts) :]))
            else:
                fed.append((i, entry["generation_prompt"] + text))
        entry["verdicts"] = ["accept" if i in free else None for i in range(len(entry["texts"]))]
        requests.append({"op": "accept", "grammar": entry["grammar"], "texts": [t for _, t in fed]})
        where.append((k, [i for i, _ in fed]))
    for (k, indices), response in zip(where, oracle.run_batch(requests), strict=True):
        if not response.get("ok", True) or "results" not in response:
            raise SystemExit(f"oracle failed on {entries[k]['id']}: {response}")
        for i, verdict in zip(indices, response["results"], strict=True):
            entries[k]["verdicts"][i] = verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-handler", type=int, default=None)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    entries = gather(args.per_handler)
    llama_cpp_verdicts(entries)
    same: Counter[str] = Counter()
    total: Counter[str] = Counter()
    by_verdict: Counter[str] = Counter()
    differ: defaultdict[str, list[str]] = defaultdict(list)
    started = time.perf_counter()
    for entry in entries:
        grammar = _grammar(
            {
                "grammar": entry["grammar"],
                "grammar_lazy": entry["lazy"],
                "grammar_triggers": [{"type": t, "value": v} for t, v in entry["triggers"]],
                "preserved_tokens": [],
                "additional_stops": [],
                "generation_prompt": entry["generation_prompt"],
            }
        )
        began = time.perf_counter()
        ours = lark_verdicts(grammar.to_lark(), entry["texts"])
        if time.perf_counter() - began > 2:
            print(f"slow: {entry['id']} {time.perf_counter() - began:.1f} s", flush=True)
        for text, want, got in zip(entry["texts"], entry["verdicts"], ours, strict=True):
            total[entry["handler"]] += 1
            by_verdict[want] += 1
            if want == got:
                same[entry["handler"]] += 1
            else:
                differ[entry["handler"]].append(f"{entry['id']}: {want} vs {got}: {text[:80]!r}")
    elapsed = time.perf_counter() - started
    for handler in sorted(total):
        print(f"{handler:36} {same[handler]:5} / {total[handler]:5}")
        for line in differ[handler][:3]:
            print("   ", line)
    print(
        f"all: {sum(same.values())} / {sum(total.values())} texts agree on {len(entries)} "
        f"grammars (llama.cpp: {dict(by_verdict)}); llguidance {elapsed:.1f} s"
    )
    if args.write:
        with args.write.open("w", encoding="utf-8") as out:
            for entry in entries:
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
