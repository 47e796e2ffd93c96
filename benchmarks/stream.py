"""Decode benchmark: finished-parse throughput, streaming cost, and re-parse-per-chunk cost.

    python benchmarks/stream.py [--full]

Measures, in one run, on the Qwen3-Coder template (shared/chat_templates):
  1. finished-parse throughput (MB/s) on long replies (prose, a thought, a long tool call);
  2. a 128 KB reply streamed in 4-character chunks vs its finished parse (goal <= 2x);
  3. the same stream parsed the way llama.cpp's server and vLLM do it: the whole text again
     for every chunk (goal: chatcodec >= 100x faster). Without --full, that loop is timed on
     an evenly spread sample of the prefixes and scaled up (its cost is linear in the prefix
     length, so the sample estimates the total); --full times every prefix.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from chatcodec import Codec
from chatcodec.reply import Turn

ROOT = Path(__file__).resolve().parent.parent
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
]
CODE = 'def f(x):\n    return {"x": x, "s": "<b>a < b</b>"}  # naïve 🚀\n\n'


def _turn(template: str) -> Turn:
    source = (ROOT.parent / "shared" / "chat_templates" / template).read_text("utf-8")
    return Codec(source).prepare(
        [{"role": "user", "content": "write it"}], tools=TOOLS, parallel_tool_calls=True
    )


def _replies(size: int) -> dict[str, str]:
    prose = ("The answer is < 42 and <b>bold</b>; see <tool_ca... no. " * (size // 50 + 1))[:size]
    code = (CODE * (size // len(CODE) + 1))[:size]
    call = (
        "Writing it.\n<tool_call>\n<function=write_file>\n<parameter=path>\nf.py\n</parameter>\n"
        f"<parameter=content>\n{code}\n</parameter>\n</function>\n</tool_call>"
    )
    return {"prose": prose, "long tool call": call}


def _best(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="time every prefix of the re-parse loop")
    args = ap.parse_args()
    turn = _turn("Qwen3-Coder.jinja")

    print("1. finished parse throughput")
    for name, text in _replies(4 << 20).items():
        seconds = _best(lambda text=text: turn.parse(text))
        print(f"   {name:16s} {len(text) / 1e6:6.1f} MB  {len(text) / seconds / 1e6:8.1f} MB/s")

    print("\n2./3. a 128 KB reply in 4-character chunks")
    print(f"   {'reply':16s} {'finished':>10s} {'streamed':>10s} {'ratio':>7s} "
          f"{'re-parse':>11s} {'speed-up':>9s}")
    for name, text in _replies(128 << 10).items():
        chunks = [text[i : i + 4] for i in range(0, len(text), 4)]

        def streamed(chunks: list[str] = chunks) -> None:
            s = turn.stream()
            for c in chunks:
                s.feed(c)
            s.flush()
            s.finish()

        finished = _best(lambda text=text: turn.parse(text))
        stream_time = _best(streamed)
        ends = [min(len(text), 4 * (i + 1)) for i in range(len(chunks))]
        step = 1 if args.full else max(1, len(ends) // 256)
        sample = ends[step - 1 :: step]
        t = time.perf_counter()
        for end in sample:
            turn.parse(text[:end], partial=True)
        reparse = (time.perf_counter() - t) * len(ends) / len(sample)
        how = "" if step == 1 else "*"
        print(
            f"   {name:16s} {finished * 1e3:8.1f}ms {stream_time * 1e3:8.1f}ms "
            f"{stream_time / finished:6.2f}x {reparse:9.2f}s{how:1s} {reparse / stream_time:8.0f}x"
        )
    if not args.full:
        print("   * re-parse loop timed on 256 evenly spread prefixes and scaled (--full: all)")


if __name__ == "__main__":
    main()
