"""Every prefix render ``render_with_spans`` uses, resumed or not, against ``render()``.

Run from the repository root (the corpus lives in ``../shared`` beside the checkout)::

    python dev/prefix_equality.py            # every case, add_generation_prompt both ways
    python dev/prefix_equality.py --every 7  # every 7th case
    python dev/prefix_equality.py --only Qwen

For each corpus case that renders (continue_final_message cases excepted), with the whole
conversation rendered with and without a generation prompt: ``PrefixRenders`` gives the
render of the first ``n`` messages, with and without a generation prompt, for every ``n``;
each must equal ``ChatTemplate.render`` of those messages (both ``None`` where the template
refuses the prefix). The run prints how many prefixes were compared, how many of them were
resumed from a watched render (template/resume.py) and how many rendered from the start,
and exits 1 on any difference.
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
from chatcodec.template.render import PrefixRenders

ROOT = Path(__file__).resolve().parent.parent


def _render(template: ChatTemplate, messages: Any, options: dict[str, Any], agp: bool) -> Any:
    try:
        return template.render(messages, add_generation_prompt=agp, **options)
    except TemplateError:
        return None


def check(template: ChatTemplate, case: dict[str, Any], agp: bool) -> tuple[int, int, list[str]]:
    """(resumed, rendered, differences) over every prefix of one case."""
    options = {
        "tools": case["tools"],
        "documents": case["documents"],
        "now": case["now_unix"],
        **case["kwargs"],
    }
    messages = case["messages"]
    try:
        prefixes = PrefixRenders.of(template, messages, add_generation_prompt=agp, **options)
    except TemplateError:
        return 0, 0, []
    differences = []
    if prefixes.text != _render(template, messages, options, agp):
        differences.append("the whole render")
    with prefixes.resuming():
        for n in range(1, len(messages) + 1):
            for flag in (False, True):
                if prefixes.render(n, flag) != _render(template, messages[:n], options, flag):
                    differences.append(f"n={n} add_generation_prompt={flag}")
    return prefixes.resumed, prefixes.rendered, differences


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    parser.add_argument("--every", type=int, default=1)
    parser.add_argument("--only", default="", help="templates whose name contains this")
    parser.add_argument("--by-template", action="store_true", help="counts per template")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # special tokens a template never reads
    path = args.shared / "oracle" / "render" / "expectations.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    compiled: dict[str, ChatTemplate] = {}
    resumed = rendered = different = 0
    counts: dict[str, list[int]] = {}
    started = time.perf_counter()
    for case in cases[:: args.every]:
        name = case["template"]
        if case["continue_final_message"] or args.only not in name:
            continue
        if name not in compiled:
            source = (args.shared / "chat_templates" / name).read_text(encoding="utf-8")
            compiled[name] = ChatTemplate(source, name=name)
        for agp in (False, True):
            got, missed, differences = check(compiled[name], case, agp)
            resumed, rendered = resumed + got, rendered + missed
            tally = counts.setdefault(name, [0, 0])
            tally[0], tally[1] = tally[0] + got, tally[1] + missed
            different += len(differences)
            for difference in differences:
                print(f"DIFFERENT: {case['id']} agp={int(agp)} {difference}", file=sys.stderr)
    if args.by_template:
        for name, (got, missed) in sorted(counts.items()):
            print(f"{name:60} {got:6} resumed {missed:6} rendered")
    print(
        f"{resumed + rendered} prefixes of {len(compiled)} templates in "
        f"{time.perf_counter() - started:.0f} s: {resumed} resumed, {rendered} rendered from "
        f"the start, {different} different"
    )
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main())
