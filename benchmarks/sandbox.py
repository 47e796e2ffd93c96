"""How far past its limits a hostile template can push one render: time overrun and memory.

    python benchmarks/sandbox.py                       # every payload class, 0.5 s / 1M chars
    python benchmarks/sandbox.py --seconds 2 --chars 64000000   # e.g. the default output limit
    python benchmarks/sandbox.py --fuzz 2000           # also the fuzz suite's hostile templates

Each payload runs in a fresh interpreter (one subprocess per payload), so its peak memory is
its own: the table shows the limit, the time the render took, the overrun past the time limit
(elapsed - limit, when positive), the peak resident memory the render added over the
interpreter's baseline (ru_maxrss), and how the render ended. ``--fuzz N`` renders the first
N templates of ``tests/test_fuzz_templates.py`` in one more subprocess and reports the worst
overrun among them and its template.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
S = "{% set s = 'x' * 100000 %}"
BIG = "{% set big = [1] * 1000000 %}"

# (class, name, template): one or two payloads per class of bound. "at its cap" payloads
# show a capped pure-Python filter's cost at its cap (run them with --chars 64000000);
# "at the limit" ones a single C call on a value as large as the output limit allows
# ({third}: a third of max_output_chars, {limit}: all of it)
# fmt: off
PAYLOADS: list[tuple[str, str, str]] = [
    ("bytes", "bytes * n", "{{ 'x'.encode() * 2000000000 }}"),
    ("bytes", "bytes % width", "{{ '%0999999999d'.encode() % 1 }}"),
    ("filter loop", "map('sum') over shared lists", BIG + "{{ ([big] * 1000)|map('sum')|list }}"),
    ("filter loop", "map('abs') in a loop", BIG + "{% for i in range(99) %}{{ big|map('abs')|list|length }}{% endfor %}"),
    ("filter loop", "select over a big list", BIG + "{% for i in range(99) %}{{ big|select('odd')|list|length }}{% endfor %}"),
    ("filter loop", "sum(start=[]) (quadratic)", "{{ ([[1] * 10] * 100000)|sum(start=[])|length }}"),
    ("filter loop", "unique lower-casing", "{% set s = 'X' * 500000 %}{{ ([s] * 2000)|unique|list|length }}"),
    ("filter loop", "max lower-casing", "{% set s = 'X' * 500000 %}{{ ([s] * 2000)|max|length }}"),
    ("pure Python", "wordwrap long word", "{{ ('x' * 1000000)|wordwrap(1) }}"),
    ("pure Python", "wordwrap many lines", "{% for i in range(99) %}{{ (('ab ' * 20000 ~ '\\n') * 15)|wordwrap(5)|length }}{% endfor %}"),
    ("pure Python", "title of long text", "{% for i in range(99) %}{{ ('ab-cd ' * 160000)|title|length }}{% endfor %}"),
    ("pure Python", "urlize of long text", "{% for i in range(99) %}{{ ('see a.com ' * 90000)|urlize|length }}{% endfor %}"),
    ("pure Python", "pprint at its cap", "{% for i in range(99) %}{{ ([[1]] * 32000)|pprint|length }}{% endfor %}"),
    ("pure Python", "tojson(indent) at its cap", "{% for i in range(99) %}{{ ([[1]] * 65000)|tojson(indent=1)|length }}{% endfor %}"),
    ("pure Python", "sort(attribute) at its cap", "{% for i in range(99) %}{{ ([{'a': 1}] * 130000)|sort(attribute='a')|length }}{% endfor %}"),
    ("pure Python", "dictsort at its cap", "{% set d = dict.fromkeys((range(100000)|list) + (range(100000, 130000)|list)) %}{% for i in range(99) %}{{ d|dictsort|length }}{% endfor %}"),
    ("shared refs", "print [s] * 1000", S + "{{ [s] * 1000 }}"),
    ("shared refs", "|string, ~", S + "{{ ([s] * 1000)|string ~ [s] * 1000 }}"),
    ("shared refs", "tojson of [s] * 1000", S + "{{ ([s] * 1000)|tojson }}"),
    ("shared refs", "sort lower-casing", S + "{{ ([s] * 1000)|sort|length }}"),
    ("shared refs", "nested doubling", S + "{% set a = [s, s] %}{% set b = [a, a] %}{% set c = [b, b] %}{% set d = [c, c] %}{% set e = [d, d] %}{% set f = [e, e] %}{% set g = [f, f] %}{% set h = [g, g] %}{{ h }}"),
    ("shared refs", "printf / format", S + "{{ '%s' % ([s] * 1000,) }}{{ '{0}'.format([s] * 1000) }}"),
    ("shared refs", "raise_exception message", S + "{{ raise_exception([s] * 1000) }}"),
    ("shared refs", "undefined key in error", S + "{{ messages[[s] * 1000].x }}"),
    ("expansion", "strftime_now('%c' * n)", "{{ strftime_now('%c' * 400000) }}"),
    ("expansion", "slice(10**8)", "{{ [1]|slice(10**8)|list }}"),
    ("expansion", "batch fill", "{{ [1]|batch(10**9, 'x')|list }}"),
    ("C call", "compare big strings", "{% set s = 'x' * 900000 %}{% for i in range(100000) %}{% if s == s ~ '' %}{% endif %}{% endfor %}"),
    ("C call", "split a big string", "{% for i in range(99) %}{{ ('ab ' * 330000).split()|length }}{% endfor %}"),
    ("C call", "sort a list at its cap", "{% set l = (range(100000)|list) + (range(30000)|list) %}{% for i in range(99) %}{{ l|sort(case_sensitive=true)|length }}{% endfor %}"),
    ("at the limit", "split a string", "{% for i in range(9) %}{{ ('ab ' * {third}).split()|length }}{% endfor %}"),
    ("at the limit", "print a list", "{% for i in range(9) %}{{ ([1] * {third})|string|length }}{% endfor %}"),
    ("at the limit", "tojson a list", "{% for i in range(9) %}{{ ([1] * {third})|tojson|length }}{% endfor %}"),
    ("at the limit", "sum a list", "{% for i in range(9) %}{{ ([1] * {limit})|sum }}{% endfor %}"),
    ("at the limit", "search a list", "{% for i in range(9) %}{{ 2 in [1] * {limit} }}{% endfor %}"),
    ("at the limit", "compare lists", "{% for i in range(9) %}{{ [1] * {limit} == [1] * {limit} }}{% endfor %}"),
    ("loops", "nested range loops", "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
    ("loops", "recursive macro", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
]
# fmt: on

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from chatcodec import ChatTemplate, Limits, TemplateError
limits = Limits(max_seconds=float(sys.argv[2]), max_output_chars=int(sys.argv[3]))
messages = [{"role": "user", "content": "Hello"}]
template = ChatTemplate(sys.stdin.read(), limits=limits)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    outcome = "rendered %d chars" % len(template.render(messages))
except TemplateError as exc:
    outcome = type(exc).__name__ + ": " + str(exc)[:60]
elapsed = time.monotonic() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"elapsed": elapsed, "peak_kb": peak, "outcome": outcome}))
"""

_FUZZ_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
from chatcodec import Limits
from tests.test_fuzz_templates import SEED, hostile_templates, render_hostile
limits = Limits(max_seconds=float(sys.argv[3]), max_output_chars=int(sys.argv[4]))
worst, worst_source, refused = 0.0, "", 0
for source in hostile_templates(int(sys.argv[5]), SEED):
    start = time.monotonic()
    refused += render_hostile(source, limits) is None
    elapsed = time.monotonic() - start
    if elapsed > worst:
        worst, worst_source = elapsed, source
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"worst": worst, "source": worst_source, "refused": refused, "peak_kb": peak}))
"""


def run_payload(source: str, seconds: float, chars: int) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(ROOT / "src"), str(seconds), str(chars)],
        input=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        return {"elapsed": 0.0, "peak_kb": 0, "outcome": "CRASH " + done.stderr[-200:]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="Limits.max_seconds")
    parser.add_argument("--chars", type=int, default=1_000_000, help="Limits.max_output_chars")
    parser.add_argument("--fuzz", type=int, default=0, help="also render N fuzz templates")
    parser.add_argument("--only", default="", help="only payloads whose class or name has this")
    args = parser.parse_args()
    print(f"limits: max_seconds={args.seconds}, max_output_chars={args.chars:,}")
    print(
        f"{'class':<12} {'payload':<30} {'limit':>6} {'elapsed':>8} {'overrun':>8} {'peak MB':>8}  outcome"
    )
    worst = 0.0
    for kind, name, source in PAYLOADS:
        if args.only and args.only not in name and args.only not in kind:
            continue
        sized = source.replace("{third}", str(args.chars // 3)).replace("{limit}", str(args.chars))
        result = run_payload(sized, args.seconds, args.chars)
        elapsed = float(result["elapsed"])  # type: ignore[arg-type]
        overrun = max(0.0, elapsed - args.seconds)
        worst = max(worst, overrun)
        peak = int(result["peak_kb"]) / 1024  # type: ignore[call-overload]
        print(
            f"{kind:<12} {name:<30} {args.seconds:>5.2f}s {elapsed:>7.2f}s {overrun:>7.2f}s"
            f" {peak:>8.1f}  {result['outcome']}",
            flush=True,
        )
    print(f"worst overrun over the payloads: {worst:.2f} s")
    if args.fuzz:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", _FUZZ_CHILD, str(ROOT / "src"), str(ROOT)]
            + [str(args.seconds), str(args.chars), str(args.fuzz)],
            capture_output=True,
            text=True,
            timeout=7200,
        )
        if done.returncode != 0:
            print("fuzz run FAILED:\n" + done.stderr[-2000:])
            return 1
        fuzz = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"fuzz: {args.fuzz} templates in {time.monotonic() - started:.0f} s, "
            f"{fuzz['refused']} refused; worst render {fuzz['worst']:.2f} s "
            f"(overrun {max(0.0, fuzz['worst'] - args.seconds):.2f} s), "
            f"peak RSS {fuzz['peak_kb'] / 1024:.0f} MB"
        )
        print(f"  its template: {fuzz['source'][:300]}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
