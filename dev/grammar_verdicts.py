"""Judge chatcodec's reply grammars and llama.cpp's on the same replies (developer tool).

    python dev/grammar_verdicts.py [--handler NAME] [--show N] [--json PATH] [--by-kind]

For every case of ../shared/oracle/parse/cases.jsonl where llama.cpp sets a grammar, both
grammars (llama.cpp's recorded text and ``prepare(...).grammar``) judge the case's outputs and
the mutations of its reply (tests/_grammar_replies.py: an undeclared tool, a second call, a
wrong-typed or out-of-enum argument, content before the call, trailing text). Each side's text
is what its sampler would be given (``judged_text``: the generation prompt and the reply for a
whole grammar, the reply from the first trigger on for a lazy one, thoughts left out beside
llama-server's reasoning budget); the verdict (accept / reject / incomplete, or ``free`` when a
lazy grammar never wakes up) is llama.cpp's own grammar engine's, through the oracle
(../shared/tools/llamacpp-oracle, one ``accept`` request per grammar with all its texts).
Prints, per handler, the replies judged, how many verdicts agree, llama.cpp's verdicts
counted, and the first differences; the exit status is 1 when a verdict differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "shared" / "tools" / "llamacpp-oracle"))

import oracle  # noqa: E402
from tests._grammar_replies import (  # noqa: E402
    call_openers,
    judged_text,
    recorded_grammar,
    replies,
    thinking_tags,
)
from tests._reply_oracle import PARSE_CASES, prepare_request  # noqa: E402

FREE = "free"  # a lazy grammar that never wakes up: the reply is not constrained


@dataclass(frozen=True)
class Judged:
    """One reply of one case, and the text each side's grammar is given of it."""

    case: str
    handler: str
    kind: str
    reply: str
    llama: tuple[str, str | None]  # (grammar, judged text)
    ours: tuple[str, str | None]


def cases(handler: str | None) -> Iterable[dict[str, Any]]:
    """The corpus cases where llama.cpp sets a grammar (of one handler, if given)."""
    for line in PARSE_CASES.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        setup = case["llama_cpp"]
        if setup and setup["grammar"] and (handler is None or setup["handler"] == handler):
            yield case


def judge_case(case: dict[str, Any], problems: Counter[tuple[str, str]]) -> list[Judged]:
    """The replies of one case with both sides' texts; a side that cannot build its grammar
    is counted in ``problems`` instead."""
    setup = case["llama_cpp"]
    handler = setup["handler"]
    try:
        turn = prepare_request(case)
        ours = turn.grammar
    except Exception as exc:  # noqa: BLE001 - a developer report
        problems[(handler, f"raises {type(exc).__name__}")] += 1
        return []
    if ours is None:
        problems[(handler, "no grammar")] += 1
        return []
    llama = recorded_grammar(setup)
    assert llama is not None
    thinking = thinking_tags(setup)
    out = []
    for reply in replies(case, call_openers(case)):
        theirs = judged_text(llama, setup["generation_prompt"], reply.text, thinking)
        mine = judged_text(ours, turn.generation_prompt, reply.text, thinking)
        out.append(
            Judged(
                case["id"], handler, reply.kind, reply.text, (llama.gbnf, theirs), (ours.gbnf, mine)
            )
        )
    return out


def verdicts(items: list[Judged], per_call: int) -> dict[tuple[str, str], str]:
    """llama.cpp's engine's verdict on every (grammar, text) the items need."""
    texts: dict[str, set[str]] = defaultdict(set)
    for item in items:
        for grammar, text in (item.llama, item.ours):
            if text is not None:
                texts[grammar].add(text)
    requests = [
        {"id": str(i), "op": "accept", "grammar": g, "texts": sorted(t)}
        for i, (g, t) in enumerate(texts.items())
    ]
    out: dict[tuple[str, str], str] = {}
    batch: list[dict[str, Any]] = []
    size = 0
    for request in requests + [None]:
        if request is not None:
            batch.append(request)
            size += len(request["texts"])
        if batch and (request is None or size >= per_call):
            for req, resp in zip(batch, oracle.run_batch(batch, timeout=3600), strict=True):
                results = resp.get("results") or ["error: " + str(resp.get("error"))] * len(
                    req["texts"]
                )
                for text, verdict in zip(req["texts"], results, strict=True):
                    out[(req["grammar"], text)] = verdict
            batch, size = [], 0
    return out


def verdict(side: tuple[str, str | None], table: dict[tuple[str, str], str]) -> str:
    grammar, text = side
    return FREE if text is None else table[(grammar, text)]


def show(item: Judged, theirs: str, mine: str) -> str:
    lines = [f"--- {item.case} [{item.kind}]: llama.cpp {theirs}, chatcodec {mine}"]
    lines.append(f"    reply: {item.reply[:300]!r}")
    if item.llama[1] != item.ours[1]:
        lines.append(f"    judged (llama.cpp): {str(item.llama[1])[:300]!r}")
        lines.append(f"    judged (chatcodec): {str(item.ours[1])[:300]!r}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--handler", help="only the cases llama.cpp gives this handler")
    ap.add_argument("--show", type=int, default=5, help="how many differences to print")
    ap.add_argument("--json", type=Path, help="write every difference here")
    ap.add_argument("--by-kind", action="store_true", help="llama.cpp's verdicts per reply kind")
    ap.add_argument("--per-call", type=int, default=4000, help="texts per oracle process")
    args = ap.parse_args()
    if not oracle.BINARY.exists():
        print(f"no oracle at {oracle.BINARY}: bash ../shared/tools/llamacpp-oracle/build.sh")
        return 2
    started = time.perf_counter()
    problems: Counter[tuple[str, str]] = Counter()
    items: list[Judged] = []
    case_count: Counter[str] = Counter()
    for case in cases(args.handler):
        judged = judge_case(case, problems)
        if judged:
            case_count[case["llama_cpp"]["handler"]] += 1
        items += judged
    table = verdicts(items, args.per_call)
    same: Counter[str] = Counter()
    differ: Counter[str] = Counter()
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    differences = []
    for item in items:
        theirs, mine = verdict(item.llama, table), verdict(item.ours, table)
        kinds[item.handler][theirs] += 1
        by_kind[item.kind][theirs] += 1
        if theirs == mine:
            same[item.handler] += 1
            continue
        differ[item.handler] += 1
        differences.append((item, theirs, mine))
    for item, theirs, mine in differences[: args.show]:
        print(show(item, theirs, mine))
    header = f"{'handler':32} {'cases':>6} {'replies':>8} {'same':>8} {'differ':>7}  llama.cpp's verdicts"
    print(header)
    for handler in sorted(set(case_count) | {h for h, _ in problems}):
        counted = ", ".join(f"{k} {n}" for k, n in sorted(kinds[handler].items()))
        total = same[handler] + differ[handler]
        print(
            f"{handler:32} {case_count[handler]:>6} {total:>8} {same[handler]:>8} "
            f"{differ[handler]:>7}  {counted}"
        )
    if args.by_kind:
        for kind, counted in sorted(by_kind.items()):
            print(f"  {kind:28} " + ", ".join(f"{k} {n}" for k, n in sorted(counted.items())))
    for (handler, problem), n in sorted(problems.items()):
        print(f"{handler:32} {n:>6} cases: {problem}")
    print(
        f"{len(items)} replies judged, {sum(differ.values())} verdicts differ "
        f"({len(table)} oracle verdicts, {time.perf_counter() - started:.0f} s)"
    )
    if args.json:
        rows = [
            {"case": i.case, "kind": i.kind, "reply": i.reply, "llama_cpp": t, "chatcodec": m}
            for i, t, m in differences
        ]
        args.json.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
