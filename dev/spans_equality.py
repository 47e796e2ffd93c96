"""render_with_spans against the prefix method on every conversation of the render corpus.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    python dev/spans_equality.py            # every case, add_generation_prompt both ways
    python dev/spans_equality.py --every 7  # every 7th case

For each corpus case that renders (continue_final_message cases excepted: spans take no
such option), ``render_with_spans`` must give the text ``render`` gives and, for templates
without ``{% generation %}``, the spans ``derive_spans_by_prefixes`` (the reference: two
real prefix renders per assistant turn) gives; a case that fails must fail with the same
error type in both. The run prints the counts and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chatcodec import ChatTemplate, TemplateError
from chatcodec.template.render import derive_spans_by_prefixes

ROOT = Path(__file__).resolve().parent.parent


def check(template: ChatTemplate, case: dict[str, Any], agp: bool) -> tuple[str, int]:
    """("same" | "failed alike" | "generation tag" | a difference, spans compared)."""
    options = {"tools": case["tools"], "documents": case["documents"], "now": case["now_unix"]}
    kwargs = case["kwargs"]
    try:
        rendered = template.render_with_spans(
            case["messages"], add_generation_prompt=agp, **options, **kwargs
        )
    except TemplateError as exc:
        try:
            template.render(case["messages"], add_generation_prompt=agp, **options, **kwargs)
        except TemplateError as again:
            return ("failed alike" if type(again) is type(exc) else "other error"), 0
        return "render_with_spans failed alone", 0
    text = template.render(case["messages"], add_generation_prompt=agp, **options, **kwargs)
    if text != rendered.text:
        return "other text", 0
    if rendered.source != "derived":
        return "generation tag", len(rendered.spans)
    reference = derive_spans_by_prefixes(
        template,
        text,
        case["messages"],
        options["tools"],
        options["documents"],
        options["now"],
        kwargs,
    )
    return ("same" if reference == rendered.spans else "other spans"), len(reference)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # special tokens a template never reads
    path = args.shared / "oracle" / "render" / "expectations.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    compiled: dict[str, ChatTemplate] = {}
    counts: dict[str, int] = {}
    spans = 0
    started = time.perf_counter()
    for case in cases[:: args.every]:
        if case["continue_final_message"]:
            continue
        name = case["template"]
        if name not in compiled:
            source = (args.shared / "chat_templates" / name).read_text(encoding="utf-8")
            compiled[name] = ChatTemplate(source, name=name)
        for agp in (False, True):
            verdict, found = check(compiled[name], case, agp)
            counts[verdict] = counts.get(verdict, 0) + 1
            spans += found if verdict == "same" else 0
            if verdict not in ("same", "failed alike", "generation tag"):
                print(f"DIFFERENT ({verdict}): {case['id']} agp={int(agp)}", file=sys.stderr)
    print(
        f"{sum(counts.values())} renders of {len(compiled)} templates in "
        f"{time.perf_counter() - started:.0f} s: {counts}; {spans} derived spans equal"
    )
    bad = sum(n for v, n in counts.items() if v not in ("same", "failed alike", "generation tag"))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
