"""Grammar benchmark: time to derive a request's reply grammar, first and cached, beside
llama.cpp's own setup time and llguidance's compile time of the same grammar.

    python benchmarks/grammar.py [--quick] [--only HANDLER] [--no-oracle] [--no-llguidance]

The requests are the parse corpus' distinct requests where llama.cpp sets a grammar and
chatcodec writes one (families whose grammar is not written yet are counted and skipped).
One row per template, then one per handler; times are medians over the requests.

Columns:
  first      deriving the GBNF text with nothing cached (`constraint.build_gbnf()` after
             `clear_grammar_cache()`): what the first request of a template, tool set and
             options costs;
  cached     the same call again (the key built from the request, then a cache hit);
  prepare    `Codec.prepare(...)` (render, reply format; template compiled beforehand) plus
             the grammar derived uncached: the whole per-request setup;
  llama.cpp  llama.cpp's per-request setup, `common_chat_templates_apply` (render, parser,
             grammar), through the oracle (../shared/tools/llamacpp-oracle, a Release build
             logging at debug level as it always does), in CPU time: a process fed each
             request R times, less a process fed the same requests without messages (which
             stop once the template is loaded), divided by the requests; so it counts what
             prepare counts, not the template's parse (an estimate: the two processes' other
             costs are assumed equal; the fastest of 2 runs each, 1 with --quick);
  gbnf parse llama.cpp's engine parsing the GBNF text (`llama_grammar_init_impl`, the oracle's
             `accept` op on R empty texts less one on none);
  llguidance llguidance compiling the same grammar: `LLMatcher(byte tokenizer, grammar)` on
             the Lark text of its own GBNF import (the import, Python, is not timed), when
             llguidance is installed.
Ratios: prepare / llama.cpp, first / llguidance, cached / first. Every time is CPU time
(the machines are shared: wall times swing by 2x under load, CPU times far less); chatcodec's
and llguidance's are the fastest of several rounds (GC off). Every grammar is first checked:
the oracle's engine parses it and llguidance compiles it without error.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chatcodec import Codec
from chatcodec.batch import prepare_with
from chatcodec.reply.select import clear_grammar_cache

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
ORACLE_DIR = SHARED / "tools" / "llamacpp-oracle"
# the case fields that make a request (the rest are its replies and labels)
REQUEST_FIELDS = (
    "template",
    "bos_token",
    "eos_token",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "enable_thinking",
    "reasoning_format",
    "chat_template_kwargs",
    "add_generation_prompt",
)


@dataclass
class Row:
    """The times of one request, in seconds (None: not measured)."""

    handler: str
    template: str
    first: float
    cached: float
    prepare: float
    gbnf: str
    llguidance: float | None = None


@dataclass
class Oracle:
    """llama.cpp's per-request times of one template's requests (seconds)."""

    setup: dict[str, float] = field(default_factory=dict)
    parse: dict[str, float] = field(default_factory=dict)


def load_requests(shared: Path, only: str | None) -> list[dict[str, Any]]:
    """The corpus' distinct requests with a grammar (in corpus order)."""
    seen: set[str] = set()
    out = []
    for line in (shared / "oracle" / "parse" / "cases.jsonl").read_text("utf-8").splitlines():
        case = json.loads(line)
        setup = case["llama_cpp"]
        if not setup or not setup["grammar"] or (only and setup["handler"] != only):
            continue
        request = {k: case[k] for k in REQUEST_FIELDS}
        key = json.dumps(request)
        if key not in seen:
            seen.add(key)
            out.append({**request, "handler": setup["handler"]})
    return out


def best(fn: Callable[[], object], rounds: int, inner: int) -> float:
    """The fastest of ``rounds`` batches of ``inner`` calls, per call, in CPU time, GC off."""
    times = []
    gc.disable()
    try:
        for _ in range(rounds):
            started = time.process_time()
            for _ in range(inner):
                fn()
            times.append((time.process_time() - started) / inner)
    finally:
        gc.enable()
    return min(times)


def measure_ours(
    requests: Sequence[dict[str, Any]], shared: Path, rounds: int
) -> tuple[list[Row], dict[str, int]]:
    """chatcodec's times per request; the count of requests skipped per handler."""
    codecs: dict[tuple[str, str, str], Codec] = {}
    rows: list[Row] = []
    skipped: dict[str, int] = defaultdict(int)
    for request in requests:
        key = (request["template"], request["bos_token"], request["eos_token"])
        if key not in codecs:
            source = (shared / "chat_templates" / key[0]).read_text("utf-8")
            codecs[key] = Codec(source, bos_token=key[1], eos_token=key[2])
        codec = codecs[key]
        constraint = prepare_with(codec, request).format.constraint
        if constraint.build_gbnf is None:
            skipped[request["handler"]] += 1
            continue
        derive = constraint.build_gbnf

        def first(derive: Callable[[], str] = derive) -> str:
            clear_grammar_cache()
            return derive()

        def whole(request: dict[str, Any] = request, codec: Codec = codec) -> str:
            clear_grammar_cache()
            gbnf = prepare_with(codec, request).format.constraint.build_gbnf
            assert gbnf is not None
            return gbnf()

        t_first = best(first, rounds, 3)
        derive()
        t_cached = best(derive, rounds, 20)
        t_prepare = best(whole, rounds, 2)
        rows.append(
            Row(request["handler"], request["template"], t_first, t_cached, t_prepare, derive())
        )
    return rows, dict(skipped)


def run_oracle(lines: Sequence[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """CPU time (user + system) of one oracle process fed ``lines``, and its answers."""
    binary = Path.home() / ".cache" / "chatcodec-oracle" / "chat_oracle"
    payload = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [str(binary), str(Path(tmp) / "oracle.log")],
            input=payload,
            capture_output=True,
            text=True,
            timeout=3600,
            check=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def measure_oracle(
    requests: Sequence[dict[str, Any]],
    rows: Sequence[Row],
    shared: Path,
    repeat: int,
    rounds: int,
) -> Oracle:
    """llama.cpp's per-request setup time and GBNF parse time, per template (each process
    run ``rounds`` times, its fastest run kept)."""
    result = Oracle()
    by_template: dict[str, list[dict[str, Any]]] = defaultdict(list)
    measured = {(r.template, r.gbnf) for r in rows}
    templates = {r.template for r in rows}
    for request in requests:
        if request["template"] in templates:
            by_template[request["template"]].append(request)
    for template, group in by_template.items():
        path = str(shared / "chat_templates" / template)
        full = [
            {**{k: r[k] for k in REQUEST_FIELDS}, "template": path, "outputs": [], "id": str(i)}
            for r in group
            for i in range(repeat)
        ]
        bare = [{k: v for k, v in r.items() if k != "messages"} for r in full]
        t_full, answers = min((run_oracle(full) for _ in range(rounds)), key=lambda run: run[0])
        t_bare = min(run_oracle(bare)[0] for _ in range(rounds))
        assert all(a.get("ok") for a in answers), answers[:1]
        result.setup[template] = max(t_full - t_bare, 0.0) / len(full)
        grammars = sorted({g for t, g in measured if t == template})
        parse = [{"op": "accept", "grammar": g, "texts": [""] * repeat} for g in grammars]
        empty = [{"op": "accept", "grammar": g, "texts": []} for g in grammars]
        t_parse, verdicts = min((run_oracle(parse) for _ in range(rounds)), key=lambda run: run[0])
        t_empty = min(run_oracle(empty)[0] for _ in range(rounds))
        bad = [v for a in verdicts for v in a["results"] if v.startswith("error")]
        assert not bad, f"llama.cpp's engine refuses a grammar of {template}: {bad[0]}"
        result.parse[template] = max(t_parse - t_empty, 0.0) / (len(grammars) * repeat)
    return result


def llguidance_compiler() -> Callable[[str], float] | None:
    """A timer of llguidance's compile of a GBNF text (None when it is not installed)."""
    try:
        import llguidance
        from llguidance.gbnf_to_lark import any_to_lark
    except ImportError:
        return None

    class Bytes:
        """A vocabulary of the 256 bytes and an end token."""

        eos_token_id = 256
        bos_token_id = None
        tokens = [bytes([b]) for b in range(256)] + [b"</s>"]
        special_token_ids = [256]

        def __call__(self, text: bytes) -> list[int]:
            return list(text)

    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes()))

    def compile_time(gbnf: str) -> float:
        lark = any_to_lark(gbnf)  # llguidance's own GBNF import (Python), not timed

        def build() -> Any:
            grammar = llguidance.LLMatcher.grammar_from_lark(lark)
            return llguidance.LLMatcher(tokenizer, grammar, log_level=0)

        matcher = build()
        assert not matcher.is_error(), matcher.get_error()
        return best(build, 3, 1)

    return compile_time


def micro(seconds: float | None) -> str:
    return f"{seconds * 1e6:10.1f}" if seconds is not None else f"{'-':>10}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:7.3f}" if a is not None and b else f"{'-':>7}"


def med(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def report(rows: Sequence[Row], oracle: Oracle | None) -> None:
    header = (
        f"{'template / handler':44} {'n':>4} {'first µs':>10} {'cached µs':>10} {'prepare µs':>10}"
        f" {'llama.cpp':>10} {'gbnf parse':>10} {'llguidance':>10}"
        f" {'prep/llama':>10} {'first/llg':>9} {'cached/first':>12}"
    )
    print(header)
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        groups[row.template].append(row)
    handlers: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        handlers[f"= {row.handler}"].append(row)
    for name, group in list(groups.items()) + list(handlers.items()):
        first, cached = med([r.first for r in group]), med([r.cached for r in group])
        prep, llg = med([r.prepare for r in group]), med([r.llguidance for r in group])
        templates = {r.template for r in group}
        setup = med([oracle.setup.get(t) for t in templates]) if oracle else None
        parse = med([oracle.parse.get(t) for t in templates]) if oracle else None
        print(
            f"{name[:44]:44} {len(group):>4} {micro(first)} {micro(cached)} {micro(prep)}"
            f" {micro(setup)} {micro(parse)} {micro(llg)}"
            f" {ratio(prep, setup):>10} {ratio(first, llg):>9} {ratio(cached, first):>12}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="every 5th request, fewer rounds")
    ap.add_argument("--only", help="one llama.cpp handler (e.g. Qwen3-Coder)")
    ap.add_argument("--shared", type=Path, default=SHARED, help="the shared corpus")
    ap.add_argument("--rounds", type=int, help="timing rounds per request")
    ap.add_argument("--repeat", type=int, default=10, help="oracle repetitions per request")
    ap.add_argument("--no-oracle", action="store_true", help="skip llama.cpp's times")
    ap.add_argument("--no-llguidance", action="store_true", help="skip llguidance's times")
    args = ap.parse_args(argv)
    requests = load_requests(args.shared, args.only)
    if args.quick:
        requests = requests[::5]
    rounds = args.rounds or (3 if args.quick else 5)
    started = time.perf_counter()
    rows, skipped = measure_ours(requests, args.shared, rounds)
    for handler, n in sorted(skipped.items()):
        print(f"{handler}: {n} requests skipped (its grammar is not written yet)")
    compile_time = None if args.no_llguidance else llguidance_compiler()
    if compile_time is not None:
        compiled: dict[str, float] = {}
        for row in rows:
            if row.gbnf not in compiled:
                compiled[row.gbnf] = compile_time(row.gbnf)
            row.llguidance = compiled[row.gbnf]
    elif not args.no_llguidance:
        print("llguidance is not installed (pip install llguidance): its column is empty")
    oracle = None
    binary = Path.home() / ".cache" / "chatcodec-oracle" / "chat_oracle"
    if not args.no_oracle and binary.exists() and rows:
        oracle = measure_oracle(requests, rows, args.shared, args.repeat, 1 if args.quick else 2)
    elif not args.no_oracle:
        print(f"no oracle at {binary} (bash {ORACLE_DIR}/build.sh): llama.cpp's columns are empty")
    print(
        f"{len(rows)} requests, {len({r.gbnf for r in rows})} distinct grammars; "
        f"CPU time; chatcodec: fastest of {rounds} rounds, GC off; oracle: x{args.repeat} per request"
    )
    report(rows, oracle)
    print(f"(took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
