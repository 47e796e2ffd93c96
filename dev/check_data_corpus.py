"""chatcodec check-data over the render corpus: every template, its rendered conversations.

    PYTHONPATH=src python dev/check_data_corpus.py [--markdown] [--examples N] [--policy P]

Each rendered case of ``../shared/oracle/render/expectations.jsonl`` that has an assistant
turn (continued final messages left out: they are prompts, not training data) is checked with
``chatcodec.checkdata.check_turns`` under its own template, special tokens, variables and
clock, read under the policy given (``guaranteed`` by default, as check-data reads). Prints
per template: conversations, failing ones, turns, turns read back, reasons (``--markdown``:
the table of docs/training.md); then the turns with calls whose calls read back.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from chatcodec import Codec
from chatcodec.checkdata import ConversationCheck, DataReport, check_turns

SHARED = Path(__file__).resolve().parent.parent.parent / "shared"


def _cases() -> list[dict[str, Any]]:
    path = SHARED / "oracle" / "render" / "expectations.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [
        c
        for c in cases
        if "error" not in c
        and not c["continue_final_message"]
        and any(isinstance(m, dict) and m.get("role") == "assistant" for m in c["messages"])
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--examples", type=int, default=0, metavar="N")
    parser.add_argument("--policy", choices=("guaranteed", "reference"), default="guaranteed")
    args = parser.parse_args()
    calls: Counter[str] = Counter()
    report = DataReport()
    examples: dict[tuple[str, str], list[str]] = defaultdict(list)
    codecs: dict[tuple[str, Any, Any], Codec] = {}
    warnings.simplefilter("ignore")
    for case in _cases():
        kwargs = dict(case["kwargs"] or {})
        bos, eos = kwargs.pop("bos_token", None), kwargs.pop("eos_token", None)
        key = (case["template"], bos, eos)
        if key not in codecs:
            source = (SHARED / "chat_templates" / case["template"]).read_text(encoding="utf-8")
            codecs[key] = Codec(source, bos_token=bos, eos_token=eos)
        check = check_turns(
            codecs[key],
            case["messages"],
            case["tools"],
            case["documents"],
            now=case["now_unix"],
            id=case["id"],
            policy=args.policy,
            **kwargs,
        )
        report.add(ConversationCheck(check.id, case["template"], check.turns, check.error))
        for turn in check.turns:
            if turn.expected and turn.expected["tool_calls"] and case["tools"]:
                calls["turns"] += 1
                read = turn.read["tool_calls"] if turn.read else None
                calls["read"] += read == turn.expected["tool_calls"]
            for reason in turn.reasons:
                examples[(case["template"], reason)].append(
                    f"{case['id']} #{turn.index}: {turn.detail}"
                )
    _print(report, args.markdown)
    print(
        f"turns with calls and tools: {calls['turns']}, calls read back: {calls['read']} "
        f"({calls['read'] / max(calls['turns'], 1):.1%}) under {args.policy}"
    )
    if args.examples:
        for (template, reason), found in sorted(examples.items()):
            print(f"\n{template} {reason}:")
            for line in found[: args.examples]:
                print(f"  {line[:200]}")
    return 0


def _print(report: DataReport, markdown: bool) -> None:
    counts = report.to_dict()
    total: Counter[str] = Counter()
    if markdown:
        print("| template | conversations | failing | turns | read back | reasons |")
        print("|---|---:|---:|---:|---:|---|")
    for name, c in counts.items():
        total.update(
            {k: c[k] for k in ("conversations", "failed_conversations", "turns", "good_turns")}
        )
        reasons = ", ".join(f"{code} {n}" for code, n in c["reasons"].items())
        share = f"{c['good_turns']} ({c['good_turns'] / c['turns']:.0%})" if c["turns"] else "-"
        cells = [
            name.removesuffix(".jinja"),
            c["conversations"],
            c["failed_conversations"],
            c["turns"],
            share,
            reasons,
        ]
        print(
            ("| " + " | ".join(map(str, cells)) + " |") if markdown else "  ".join(map(str, cells))
        )
    reasons: Counter[str] = Counter()
    for c in counts.values():
        reasons.update(c["reasons"])
    print(
        f"\n{len(counts)} templates, {total['conversations']} conversations "
        f"({total['failed_conversations']} failing), {total['turns']} turns, "
        f"{total['good_turns']} read back ({total['good_turns'] / max(total['turns'], 1):.1%})"
    )
    print("reasons: " + ", ".join(f"{code} {n}" for code, n in reasons.most_common()))


if __name__ == "__main__":
    sys.exit(main())
