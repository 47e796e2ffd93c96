"""Compare chatcodec's reply grammars with llama.cpp's on the parse corpus (developer tool).

    python dev/grammar_text.py [--handler NAME] [--show N]

Every case of ../shared/oracle/parse/cases.jsonl records llama.cpp's grammar text; the
automaton rules (``until-N``, ``ac-N``) are renamed by order of first reference on both sides
before comparing, since llama.cpp numbers them by parser id.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests._grammar_compare import normalize  # noqa: E402
from tests._reply_oracle import PARSE_CASES, prepare_request  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--handler")
    ap.add_argument("--show", type=int, default=1)
    args = ap.parse_args()
    counts: Counter[tuple[str, str]] = Counter()
    shown = 0
    for line in PARSE_CASES.read_text().splitlines():
        case = json.loads(line)
        setup = case["llama_cpp"]
        if setup is None or (args.handler and setup["handler"] != args.handler):
            continue
        expected = setup["grammar"]
        try:
            turn = prepare_request(case)
            grammar = turn.grammar
            got = grammar.gbnf if grammar is not None else ""
        except Exception as exc:  # noqa: BLE001 - a developer report
            got = f"<{type(exc).__name__}: {exc}>"
        same = normalize(got) == normalize(expected)
        counts[(setup["handler"], "same" if same else "differs")] += 1
        if not same and shown < args.show:
            shown += 1
            print(f"--- {case['id']}")
            diff = difflib.unified_diff(
                normalize(expected).splitlines(),
                normalize(got).splitlines(),
                "llama.cpp",
                "chatcodec",
                lineterm="",
                n=1,
            )
            print("\n".join(list(diff)[:60]))
    for (handler, verdict), n in sorted(counts.items()):
        print(f"{handler:35} {verdict:10} {n}")
    return 0 if not any(v == "differs" for _, v in counts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
