"""Decode benchmark: finished-parse throughput, streaming cost, and re-parse-per-chunk cost.

    python benchmarks/stream.py [--quick] [--full] [--only NAME] [--calls]

Two tables. The first, one template per reply family (and three auto-parser templates), two replies each:
  text  the corpus reply with its thought and content made long (prose full of '<', '[', '{'),
  call  the corpus reply with one string argument of a tool call made long (the same prose).
Both are built from the parse corpus' request for that template (`reasoning_content_tool`,
or the closest case that parses), so they are replies the template's format really reads.

Columns, per reply:
  parse MB/s   finished-parse throughput (`turn.parse`) on a 1 MB reply (--quick: 128 KB);
  stream       the 128 KB reply fed in 4-character chunks (`feed` x N, then `finish`),
               and that time per chunk;
  x parse      stream time / finished parse time of the same 128 KB (goal <= 2);
  128K/64K     stream time of the 128 KB reply / of its 64 KB version: 2.0 is linear;
  re-parse     the same stream the way llama.cpp's server and vLLM decode it: the finished
               parse of the whole text so far after every chunk; speed-up = re-parse / stream
               (goal >= 100x). Its cost is linear in the prefix, so without --full it is
               timed on evenly spread prefixes and scaled to all of them (marked *); --full
               times every prefix (slow: minutes per family).
Every time is the best of 3 runs (--quick: 1); the machines are shared and noisy. Every
stream is first checked: its deltas fold to the finished parse.

The second table (alone with --calls) is the cost per chunk of streaming one tool call, at
call sizes of 100 B, 1 KB, 10 KB and 1 MB, against plain text of the same size (the
baseline). Per family (CALL_FAMILIES), the corpus reply that is one call (`tool_single`)
has its "Paris" argument stretched so that the reply is the size (a call shorter than the
family's own is left as written: the size column shows it), and the corpus reply that is
plain text (`plain`) has its content stretched to the size. Both are fed in chunks of 1 to
7 characters (4 on average, as a tokenizer's tokens), `feed` then `finish`, the stream made
before the clock starts; the clock is the process's CPU time (the machines are shared). Columns: µs per chunk of the text and of the call, and call/text
(goal <= 2 at every size).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from chatcodec.batch import prepare_request
from chatcodec.reply import AssistantMessage, Turn, fold

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT.parent / "shared" / "oracle" / "parse" / "cases.jsonl"

# (family, template): one template per llama.cpp handler, and three auto-parser templates
FAMILIES: tuple[tuple[str, str], ...] = (
    ("Qwen3-Coder", "Qwen3-Coder.jinja"),
    ("DeepSeek DSML", "deepseek-ai-DeepSeek-V3.2.jinja"),
    ("gpt-oss", "openai-gpt-oss-120b.jinja"),
    ("Gemma 4", "google-gemma-4-31B-it.jinja"),
    ("Kimi K2", "Kimi-K2-Thinking.jinja"),
    ("Kimi K3", "Kimi-K3.jinja"),
    ("Ministral", "mistralai-Ministral-3-14B-Reasoning-2512.jinja"),
    ("LFM2", "LFM2-8B-A1B.jinja"),
    ("LFM2.5", "LFM2.5-8B-A1B.jinja"),
    ("Cohere2 MoE", "Cohere2MoE.jinja"),
    ("MiniMax-M3", "MiniMax-M3.jinja"),
    ("Ling 3.0", "inclusionai-ling-3.0-flash.jinja"),
    ("MiniCPM5", "openbmb-MiniCPM5-1B.jinja"),
    ("Muse Glimmer", "muse-glimmer.jinja"),
    ("Functionary 3.2", "meetkai-functionary-medium-v3.2.jinja"),
    ("GigaChat V3", "GigaChat3-10B-A1.8B.jinja"),
    ("auto: Hermes 3", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"),
    ("auto: Qwen3", "Qwen-Qwen3-0.6B.jinja"),
    ("auto: Llama 3.1", "meta-llama-Llama-3.1-8B-Instruct.jinja"),
)
# the corpus requests tried in turn: the first whose reply parses and has what is stretched
REQUESTS = (
    "auto-par1__reasoning_content_tool",
    "auto-par0__reasoning_tool",
    "auto-par1__content_tool",
    "required-par0__content_tool",
    "auto-par0__tool_single",
    "auto-par0__reasoning",
)
# the corpus replies' thought and content phrases (stretched in the text reply)
PHRASES = (
    "Need the weather first.",
    "Checking now.",
    "Let me check the weather for you.",
    "The user asks about the weather in Paris.",
    "I know it is sunny there today.",
    "I should call get_weather for Paris.",
)
ARGUMENT = "Paris"  # the string argument stretched in the call reply
# no quote, backslash or newline: a valid string in every family's argument syntax
PROSE = "The answer is < 42 and <b>bold</b>; see x[1] = {y} & <tool_ca... no, naïve 🚀. "
CHUNK = 4
SIZE = 128 << 10

# the call-size table: families, sizes, the corpus requests of a lone call and of plain text
CALL_FAMILIES = (
    "Qwen3-Coder",
    "DeepSeek DSML",
    "gpt-oss",
    "Kimi K2",
    "auto: Hermes 3",
    "auto: Qwen3",
)
CALL_SIZES = (100, 1 << 10, 10 << 10, 1 << 20)
CALL_REQUESTS = ("auto-par0__tool_single", "auto-par1__tool_single", "required-par0__tool_single")
TEXT_REQUESTS = ("auto-par0__plain", "auto-par1__plain", "auto-par0-think0__plain")
# chunk sizes, cycled: 1 to 7 characters, 4 on average (a tokenizer's tokens)
TOKEN_SIZES = (4, 3, 5, 2, 6, 4, 1, 7, 3, 5)


def _fill(size: int) -> str:
    return (PROSE * (size // len(PROSE) + 1))[:size]


def _stretch(text: str, words: tuple[str, ...], size: int) -> str:
    """``text`` with each of ``words`` in it replaced by prose, ``size`` characters in all."""
    found = [w for w in words if w in text]
    if not found:
        return ""
    rest = len(text) - sum(text.count(w) * len(w) for w in found)
    each = max(1, (size - rest) // sum(text.count(w) for w in found))
    for w in found:
        text = text.replace(w, _fill(each))
    return text


def _stretched_len(message: AssistantMessage, kind: str) -> int:
    if kind == "text":
        return len(message.content) + len(message.reasoning_content)
    return sum(len(c.arguments) for c in message.tool_calls)


def _replies(template: str) -> dict[str, tuple[Turn, Callable[[int], str]]]:
    """Per reply kind: the turn of its corpus request and a builder of the reply at a size."""
    stem = template.removesuffix(".jinja")
    wanted = {f"{stem}__{r}": r for r in REQUESTS}
    requests: dict[str, dict] = {}  # type: ignore[type-arg]
    with CASES.open(encoding="utf-8") as f:
        for line in f:
            if f'"{stem}__' in line[:300]:
                case = json.loads(line)
                if case["id"] in wanted:
                    requests[wanted[case["id"]]] = case
    found: dict[str, tuple[Turn, Callable[[int], str]]] = {}
    for name in REQUESTS:
        case = requests.get(name)
        if case is None:
            continue
        reply = next(o["text"] for o in case["outputs"] if o["kind"] == "final")
        turn = prepare_request(case)
        for kind, words in (("text", PHRASES), ("call", (ARGUMENT,))):
            if kind in found:
                continue
            probe = _stretch(reply, words, 4096)
            # most of the stretched text must land in the field (a part may be dropped text)
            need = (4096 - len(reply)) // max(1, sum(reply.count(w) for w in words))
            try:
                ok = bool(probe) and _stretched_len(turn.parse(probe), kind) >= need
            except Exception:  # noqa: BLE001 - a reply this request's format does not read
                ok = False
            if ok:
                found[kind] = (turn, partial(_stretch, reply, words))
    return found


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _stream(turn: Turn, chunks: list[str]) -> None:
    s = turn.stream()
    feed = s.feed
    for c in chunks:
        feed(c)
    s.finish()


def _chunks(text: str) -> list[str]:
    return [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]


def _check(turn: Turn, text: str) -> bool:
    """The stream's deltas fold to the finished parse (the benchmark times nothing wrong)."""
    s = turn.stream()
    deltas = [d for c in _chunks(text) for d in s.feed(c)] + s.finish().deltas
    whole = turn.parse(text)
    folded = fold(deltas)
    return (folded.content, folded.reasoning_content, folded.tool_calls) == (
        whole.content,
        whole.reasoning_content,
        whole.tool_calls,
    )


def _measure(
    turn: Turn, text: str, half: str, large: str, repeat: int, samples: int
) -> tuple[float, float, float, float, float, int]:
    """(finished parse of ``large``, of ``text``, stream of ``text``, of ``half``, re-parse
    loop, its sampling step): the re-parse loop is timed on ``samples`` prefixes (0: all)."""
    parse_big = _best(partial(turn.parse, large), repeat)
    finished = _best(partial(turn.parse, text), max(repeat, 3))
    chunks = _chunks(text)
    stream_time = _best(partial(_stream, turn, chunks), repeat)
    half_time = _best(partial(_stream, turn, _chunks(half)), repeat)
    ends = [min(len(text), CHUNK * (i + 1)) for i in range(len(chunks))]
    step = 1 if samples <= 0 else max(1, len(ends) // samples)
    sample = ends[step - 1 :: step]

    def reparse_loop() -> None:
        for end in sample:
            turn.parse(text[:end], partial=True)

    reparse = _best(reparse_loop, repeat if samples > 0 else 1) * len(ends) / len(sample)
    return parse_big, finished, stream_time, half_time, reparse, step


def _cases(template: str, names: tuple[str, ...]) -> list[dict]:  # type: ignore[type-arg]
    """The corpus cases of ``template`` named ``names``, in that order."""
    stem = template.removesuffix(".jinja")
    wanted = {f"{stem}__{r}": r for r in names}
    found: dict[str, dict] = {}  # type: ignore[type-arg]
    with CASES.open(encoding="utf-8") as f:
        for line in f:
            if f'"{stem}__' in line[:300]:
                case = json.loads(line)
                if case["id"] in wanted:
                    found[wanted[case["id"]]] = case
    return [found[n] for n in names if n in found]


def _final(case: dict) -> str:  # type: ignore[type-arg]
    return str(next(o["text"] for o in case["outputs"] if o["kind"] == "final"))


def _sized_replies(template: str) -> tuple[Turn, Callable[[int], str], Turn, Callable[[int], str]]:
    """(turn, builder) of a lone call and of plain text: the builder gives a reply of a size."""
    call_case = _cases(template, CALL_REQUESTS)[0]
    call_turn, call_text = prepare_request(call_case), _final(call_case)
    text_case = _cases(template, TEXT_REQUESTS)[0]
    text_turn, text_reply = prepare_request(text_case), _final(text_case)
    content = text_turn.parse(text_reply).content
    assert content and text_reply.count(content) == 1, template

    def call(size: int) -> str:
        fill = max(len(ARGUMENT), size - len(call_text) + len(ARGUMENT))
        return call_text.replace(ARGUMENT, _fill(fill), 1)

    def text(size: int) -> str:
        return text_reply.replace(content, _fill(max(1, size - len(text_reply) + len(content))))

    return call_turn, call, text_turn, text


def _token_chunks(text: str) -> list[str]:
    out, at, k = [], 0, 0
    while at < len(text):
        size = TOKEN_SIZES[k % len(TOKEN_SIZES)]
        out.append(text[at : at + size])
        at, k = at + size, k + 1
    return out


def _per_chunk(turn: Turn, text: str, quick: bool) -> float:
    """Seconds per chunk of streaming ``text`` (best of a few runs, each of enough streams
    of ~20,000 chunks; the streams are made before the clock starts)."""
    pieces = _token_chunks(text)
    if not _check_chunks(turn, text, pieces):
        raise SystemExit(f"STREAM != PARSE: {text[:80]!r}")
    streams = max(1, (5_000 if quick else 20_000) // len(pieces))
    best = float("inf")
    for _ in range(1 if quick or len(pieces) > 100_000 else 3):
        made = [turn.stream() for _ in range(streams)]
        t = time.process_time()
        for s in made:
            feed = s.feed
            for c in pieces:
                feed(c)
            s.finish()
        best = min(best, time.process_time() - t)
    return best / streams / len(pieces)


def _check_chunks(turn: Turn, text: str, pieces: list[str]) -> bool:
    s = turn.stream()
    deltas = [d for c in pieces for d in s.feed(c)] + s.finish().deltas
    whole, folded = turn.parse(text), fold(deltas)
    return (folded.content, folded.tool_calls) == (whole.content, whole.tool_calls)


def call_table(only: str | None, quick: bool) -> None:
    """Per family and call size: µs per chunk of plain text and of one tool call."""
    print(
        "\ncalls: µs per chunk (1-7 characters, 4 on average) of plain text and of one tool call"
        " of the size\n"
    )
    print(f"{'family':16s} {'size':>9s} {'text':>7s} {'call':>7s} {'call/text':>9s}")
    ratios: list[float] = []
    templates = dict(FAMILIES)
    for family in CALL_FAMILIES:
        if only and only.lower() not in family.lower():
            continue
        call_turn, call, text_turn, text = _sized_replies(templates[family])
        for size in CALL_SIZES:
            call_reply, text_reply = call(size), text(size)
            per_text = _per_chunk(text_turn, text_reply, quick)
            per_call = _per_chunk(call_turn, call_reply, quick)
            ratios.append(per_call / per_text)
            print(
                f"{family:16s} {len(call_reply):>9,d} {per_text * 1e6:7.2f} {per_call * 1e6:7.2f} "
                f"{per_call / per_text:8.2f}x"
            )
    if ratios:
        print(
            f"\nworst call/text {max(ratios):.2f}x, median {sorted(ratios)[len(ratios) // 2]:.2f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller samples")
    ap.add_argument("--full", action="store_true", help="time every prefix of the re-parse loop")
    ap.add_argument("--only", help="only the families whose name contains this")
    ap.add_argument("--calls", action="store_true", help="only the call-size table")
    args = ap.parse_args()
    if args.calls:
        call_table(args.only, args.quick)
        return
    repeat = 1 if args.quick else 3
    big = SIZE if args.quick else 1 << 20
    samples = 16 if args.quick else 64

    head = (
        f"{'family':16s} {'reply':5s} {'parse':>8s} {'stream':>8s} {'/chunk':>7s} "
        f"{'x parse':>8s} {'128K/64K':>8s} {'re-parse':>9s} {'speed-up':>8s}"
    )
    units = (
        f"{'':16s} {'':5s} {'MB/s':>8s} {'ms':>8s} {'us':>7s} {'':>8s} {'':>8s} {'s':>9s} {'':>8s}"
    )
    print(
        f"decode: {SIZE >> 10} KB replies in {CHUNK}-character chunks "
        f"(finished parse on {big >> 10} KB)\n"
    )
    print(head)
    print(units)
    ratios: list[float] = []
    speedups: list[float] = []
    for family, template in FAMILIES:
        if args.only and args.only.lower() not in family.lower():
            continue
        replies = _replies(template)
        for kind in ("text", "call"):
            if kind not in replies:
                print(f"{family:16s} {kind:5s} (no corpus reply of this kind)")
                continue
            turn, build = replies[kind]
            text, half, large = build(SIZE), build(SIZE // 2), build(big)
            if not _check(turn, text):
                print(f"{family:16s} {kind:5s} STREAM != PARSE")
                continue
            parse_big, finished, stream_time, half_time, reparse, step = _measure(
                turn, text, half, large, repeat, 0 if args.full else samples
            )
            chunks = len(text) // CHUNK
            ratios.append(stream_time / finished)
            speedups.append(reparse / stream_time)
            print(
                f"{family:16s} {kind:5s} {len(large) / parse_big / 1e6:8.1f} "
                f"{stream_time * 1e3:8.1f} {stream_time / chunks * 1e6:7.2f} "
                f"{stream_time / finished:8.1f} {stream_time / half_time:8.2f} "
                f"{reparse:8.2f}{'' if step == 1 else '*'} {reparse / stream_time:7.0f}x"
            )
    if ratios:
        ratios.sort()
        speedups.sort()
        print(
            f"\nmedian: stream / finished parse {ratios[len(ratios) // 2]:.1f}x, "
            f"speed-up over re-parse {speedups[len(speedups) // 2]:.0f}x "
            f"(lowest {speedups[0]:.0f}x)"
        )
    if not args.full:
        print(
            f"* re-parse loop timed on {samples} evenly spread prefixes and scaled to all "
            f"{SIZE // CHUNK} (--full: every prefix)"
        )
    call_table(args.only, args.quick)


if __name__ == "__main__":
    main()
