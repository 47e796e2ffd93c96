"""How far past its limits a hostile template can push one render: CPU overrun and memory.

    python benchmarks/sandbox.py                       # every payload, 0.5 s / 16,000,000 chars
    python benchmarks/sandbox.py --chars 1000000       # the same with a tighter output limit
    python benchmarks/sandbox.py --fuzz 2000           # also the fuzz suite's hostile templates

The payloads are every hostile template of ``tests/test_sandbox.py`` (attacks, slow templates,
bounds inside one call, capped filters, uninterruptible calls) and the payloads below, which
run each capped call at its cap in a loop (so that one call straddles the deadline), or build
one value as large as the output limit allows. Each runs in a fresh interpreter (one
subprocess per payload), so its peak memory is its own. The parent reads the child's CPU time
from /proc when the time limit passes and again when the render ends: the difference is the
overrun, the CPU seconds spent past the deadline (0 when the render ended before it), which a
loaded machine does not inflate. Peak memory is the resident memory the render added over the
interpreter's baseline (ru_maxrss). The output is markdown: one table with the worst overrun
and the largest peak of each class of payload (docs/security.md pastes it), and with ``--all``
one row per payload. ``--fuzz N`` renders the first N templates of
``tests/test_fuzz_templates.py`` in one more subprocess and reports the worst among them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
S = "{% set s = 'x' * 100000 %}"
BIG = "{% set big = [1] * 1000000 %}"
LOOP = "{% for i in range(99) %}"
# the longest strings of distinct characters the codecs' cap lets through (punycode's worst)
DISTINCT = "".join(chr(0x4E00 + 7 * i) for i in range(512))
PUNY = "".join(chr(0x4E00 + 7 * i) for i in range(210)).encode("punycode").decode()

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
    ("codec at its cap", "punycode encode, 512 distinct", LOOP + "{{ '" + DISTINCT + "'.encode('punycode')|length }}{% endfor %}"),
    ("codec at its cap", "punycode decode, 507 bytes", LOOP + "{{ '" + PUNY + "'.encode().decode('punycode')|length }}{% endfor %}"),
    ("codec at its cap", "idna encode, 256 labels", LOOP + "{{ ('\u4e00.' * 256).encode('idna')|length }}{% endfor %}"),
    ("codec at its cap", "idna encode, one 512-char label", "{{ '" + DISTINCT + "'.encode('idna') }}"),
    ("codec at the limit", "namereplace measured, refused", "{{ ('\u00e9' * {third}).encode('ascii', 'namereplace')|length }}"),
    ("codec at the limit", "unicode_escape of a third", LOOP + "{{ ('\\x00' * ({limit} // 12)).encode('unicode_escape')|length }}{% endfor %}"),
    ("codec at the limit", "utf-16 of the limit, refused", "{{ ('x' * {limit}).encode('utf-16')|length }}"),
    ("codec at the limit", "backslashreplace decode", LOOP + "{{ ('\u00e9' * ({limit} // 10)).encode().decode('ascii', 'backslashreplace')|length }}{% endfor %}"),
    ("codec at its cap", "utf-16 decode, 2^17 bad units", LOOP + "{{ ('\\x00\u00d8' * 131072).encode('latin-1').decode('utf-16', 'replace')|length }}{% endfor %}"),
    ("Markup at its cap", "striptags, 2^30 chars copied", LOOP + "{{ ('<a>' * 18900)|striptags|length }}{% endfor %}"),
    ("Markup at its cap", "striptags, 65,536 entities", LOOP + "{{ ('&lt;' * 65536)|striptags|length }}{% endfor %}"),
    ("Markup at its cap", "Markup.split, 65,536 parts", LOOP + "{{ ((',' * 65535)|safe).split(',')|length }}{% endfor %}"),
    ("Markup at its cap", "Markup.splitlines", LOOP + "{{ (('\n' * 65536)|safe).splitlines()|length }}{% endfor %}"),
    ("Markup at its cap", "Markup.join, 65,536 items", LOOP + "{{ (''|safe).join(['<'] * 65536)|length }}{% endfor %}"),
    ("Markup at its cap", "Markup %, 65,536 fields", LOOP + "{{ ((('%s' * 32768)|safe) % (('<',) * 32768))|length }}{% endfor %}"),
    ("Markup at its cap", "Markup.unescape, 65,536", LOOP + "{{ (('&lt;' * 65536)|safe).unescape()|length }}{% endfor %}"),
    ("Markup at its cap", "Markup |indent, 65,536 lines", LOOP + "{{ ('\n' * 65535)|safe|indent|length }}{% endfor %}"),
    ("Markup at its cap", "Markup |title in pieces", LOOP + "{{ (('ab-cd ' * 160000)|safe|title)|length }}{% endfor %}"),
    ("pure Python", "indent at its cap (2^20 lines)", LOOP + "{{ ('\n' * 1048575)|indent|length }}{% endfor %}"),
    ("memory per value", "slice into one-item lists", "{{ ([1]|slice({limit}, 'x')|list)|length }}"),
    ("memory per value", "batch into one-item lists", "{{ (([1] * {limit})|batch(1)|list)|length }}"),
    ("memory per value", "split into fresh strings", "{{ ('ab ' * ({limit} // 3)).split()|length }}"),
    ("memory per value", "list of references", "{{ ([1] * {limit})|length }}"),
    ("loops", "nested range loops", "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
    ("loops", "recursive macro", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"),
]
# fmt: on

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from chatcodec import ChatTemplate, Limits, TemplateError
limits = Limits(max_seconds=float(sys.argv[2]), max_output_chars=int(sys.argv[3]))
data = json.loads(sys.argv[4])
source = sys.stdin.read()
template = ChatTemplate(source, limits=limits)
extra = {"custom": data["custom"]} if "custom" in source else {}
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("start", flush=True)  # the parent starts the deadline's clock
start = cpu()
try:
    text = template.render(data["messages"], tools=data["tools"], documents=data["documents"], **extra)
    outcome = "rendered %d chars" % len(text)
except TemplateError as exc:
    outcome = type(exc).__name__ + ": " + str(exc)[:70]
end = cpu()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"cpu": end - start, "cpu_end": end, "peak_kb": peak, "outcome": outcome}))
"""

# what the suite's payloads are rendered with (tests/test_sandbox.py's request_data)
REQUEST = {
    "messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "documents": [{"title": "doc", "text": "body"}],
    "custom": {"items": [1, 2], "flag": True},
}
_TICK = os.sysconf("SC_CLK_TCK")


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


def suite_payloads() -> list[tuple[str, str, str]]:
    """Every hostile template of tests/test_sandbox.py, classed by the test that holds it."""
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    from tests import test_sandbox as suite

    found = [("suite: attack", name, source) for name, source, _ in suite.PAYLOADS]
    found += [("suite: slow", name, source) for name, source in suite.SLOW_PAYLOADS]
    found += [("suite: one call", name, source) for name, source in suite.BOUND_PAYLOADS]
    found += [("suite: capped filter", name, source) for name, source in suite.CAPPED_PAYLOADS]
    found += [
        ("suite: uninterruptible", name, source)
        for name, source, _, _ in suite.UNINTERRUPTIBLE_PAYLOADS
    ]
    return [
        (kind, name, source.replace("{marker}", "/nonexistent/pwned"))
        for kind, name, source in found
    ]


def _cpu_of(pid: int) -> float | None:
    # utime + stime of a running process (fields 14 and 15 of /proc/<pid>/stat)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def run_payload(source: str, seconds: float, chars: int) -> dict[str, Any]:
    with tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(ROOT / "src"), str(seconds), str(chars)]
            + [json.dumps(REQUEST)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(source)
        child.stdin.close()
        at_deadline = None
        if child.stdout.readline().strip() == "start":
            try:
                child.wait(timeout=seconds)  # (it writes one short line: the pipe holds it)
            except subprocess.TimeoutExpired:
                at_deadline = _cpu_of(child.pid)  # None: it ended meanwhile
        out = child.stdout.read()
        child.wait(timeout=600)
        errors.seek(0)
        err = errors.read()
    if child.returncode != 0 or not out.strip():
        return {"cpu": 0.0, "overrun": 0.0, "peak_kb": 0, "outcome": "CRASH " + err[-200:]}
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    ended = result["cpu_end"]
    result["overrun"] = 0.0 if at_deadline is None else max(0.0, ended - at_deadline)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="Limits.max_seconds")
    parser.add_argument("--chars", type=int, default=16_000_000, help="Limits.max_output_chars")
    parser.add_argument("--fuzz", type=int, default=0, help="also render N fuzz templates")
    parser.add_argument("--only", default="", help="only payloads whose class or name has this")
    parser.add_argument("--all", action="store_true", help="also print a row per payload")
    args = parser.parse_args()
    rows: list[tuple[str, str, float, float, float, float, str]] = []
    for kind, name, source in suite_payloads() + PAYLOADS:
        if args.only and args.only not in name and args.only not in kind:
            continue
        sized = source.replace("{third}", str(args.chars // 3)).replace("{limit}", str(args.chars))
        # a value as large as the output limit allows takes longer than 0.5 s to build: the
        # limit is set far enough that the output limit is what stops it
        seconds = max(args.seconds, 120.0) if kind == "memory per value" else args.seconds
        result = run_payload(sized, seconds, args.chars)
        peak = result["peak_kb"] / 1024
        outcome = result["outcome"]
        name, outcome = name.replace("|", "\\|"), outcome.replace("|", "\\|")  # markdown
        rows.append((kind, name, seconds, result["cpu"], result["overrun"], peak, outcome))
        print(
            f"  {kind}: {name}: overrun {result['overrun']:.2f} s, {peak:.0f} MB", file=sys.stderr
        )
    print(f"`max_seconds={args.seconds}`, `max_output_chars={args.chars:,}`\n")
    print("| class | payloads | worst CPU overrun | its payload | largest peak | its payload |")
    print("| --- | ---: | ---: | --- | ---: | --- |")
    for kind in dict.fromkeys(row[0] for row in rows):
        mine = [row for row in rows if row[0] == kind]
        late = max(mine, key=lambda row: row[4])
        big = max(mine, key=lambda row: row[5])
        limit = f" (limit {late[2]:g} s)" if late[2] != args.seconds else ""
        print(
            f"| {kind} | {len(mine)} | {late[4]:.2f} s{limit} | {late[1]} | {big[5]:.0f} MB "
            f"| {big[1]} |"
        )
    worst = max(rows, key=lambda row: row[4])
    print(f"\nworst overrun: {worst[4]:.2f} s CPU ({worst[0]}: {worst[1]})")
    if args.all:
        print("\n| class | payload | CPU | overrun | peak | outcome |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
        for kind, name, _, cpu, overrun, peak, outcome in rows:
            print(
                f"| {kind} | {name} | {cpu:.2f} s | {overrun:.2f} s | {peak:.0f} MB | {outcome} |"
            )
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
