"""What setting a request up on a worker thread costs `chatcodec serve` (issue 37).

    python benchmarks/serve_setup.py [--requests 2000] [--rounds 3]

The server sets every request up (``chatcodec.serve.chat.prepare``: the render, the decoder,
the grammar) on a worker thread, so that no request's setup holds up the event loop. Before
issue 37, a body up to 16 KiB was set up on the event loop itself. This script prepares the
same small request both ways, one after the other on one event loop, and prints the time
per setup: wall time and the process's CPU time (both threads counted). The request is one
user message, without tools and with one tool; the template is Qwen2.5's from ../shared, or
examples/chatml-tiny when ../shared is absent. The difference between the two rows of a
request is the cost of the handoff to the thread and back.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from chatcodec import Codec
from chatcodec.serve import RemoteEngine
from chatcodec.serve.chat import prepare
from chatcodec.serve.schema import ChatRequest

ROOT = Path(__file__).resolve().parent.parent
SHARED_TEMPLATE = ROOT.parent / "shared" / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def codec() -> tuple[Codec, str]:
    if SHARED_TEMPLATE.exists():
        return Codec(SHARED_TEMPLATE.read_text("utf-8"), eos_token="<|im_end|>"), "Qwen2.5"
    source = (ROOT / "examples" / "chatml-tiny" / "chat_template.jinja").read_text("utf-8")
    return Codec(source, eos_token="<|im_end|>"), "chatml-tiny"


async def per_setup(
    inline: bool, codec: Codec, body: ChatRequest, engine: Any, n: int
) -> tuple[float, float]:
    """(wall, CPU) microseconds per setup over ``n`` setups."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        if inline:
            prepare(codec, body, engine, "guaranteed")
        else:
            await asyncio.to_thread(prepare, codec, body, engine, "guaranteed")
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


async def run(requests: int, rounds: int) -> None:
    the_codec, name = codec()
    engine = RemoteEngine("http://127.0.0.1:9/v1")  # never reached: setup only
    message = {"role": "user", "content": "What's the weather in Paris?"}
    print(f"template {name}; {requests} setups a run, median of {rounds} runs")
    print(f"{'request':<12} {'where':<14} {'wall us':>9} {'CPU us':>9}")
    for label, tools in (("no tools", None), ("one tool", [TOOL])):
        body = ChatRequest.model_validate({"model": "m", "messages": [message], "tools": tools})
        for inline in (True, False):
            await per_setup(inline, the_codec, body, engine, requests // 10)  # warm
        for inline in (True, False):
            runs = [
                await per_setup(inline, the_codec, body, engine, requests) for _ in range(rounds)
            ]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            where = "event loop" if inline else "worker thread"
            print(f"{label:<12} {where:<14} {wall:>9.0f} {cpu:>9.0f}")
    await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.rounds))


if __name__ == "__main__":
    main()
