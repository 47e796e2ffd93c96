"""Remote engine benchmark: the cost of reading one long SSE line, by its length and reads.

    python benchmarks/engine_lines.py [--quick]

An engine stand-in on loopback (Starlette on uvicorn, in a thread) streams one event whose
line is 1, 4 or 15 MiB long (under `MAX_LINE`, 16 MiB), in writes of 64 KiB or 4 KiB, then
``[DONE]``. `RemoteEngine.generate` reads it whole. Columns: the line, the write size, the
writes that size makes, the best of 3 wall-clock times (--quick: 1) and that time per MiB.
A flat ms/MiB column is a linear reader.

The last column, "re-split", is the way main read lines before issue 37: every read joined
to the unfinished line and the whole split again. It is timed on the same reads in memory
(no HTTP), once, so it shows that reader's cost alone; it grows with the square of the line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402
from tests._standin import ServerThread  # noqa: E402

from chatcodec.serve import Generation, RemoteEngine  # noqa: E402

MIB = 1024 * 1024


class LongLine:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.app = Starlette(routes=[Route("/v1/completions", self.answer, methods=["POST"])])

    async def answer(self, request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for data in self.writes:
                yield data

        return StreamingResponse(body(), media_type="text/event-stream")


def line_of(size: int) -> bytes:
    event = {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}
    head = b'data: {"choices": [{"index": 0, "text": "'
    tail = b'", "finish_reason": null}]}\n\n'
    text = b"x" * (size - len(head) - len(tail))
    return head + text + tail + b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n"


async def read(engine: RemoteEngine) -> tuple[int, float]:
    """The characters of one generation, and the seconds it took to read."""
    start = time.perf_counter()
    size = sum([len(p.text) async for p in engine.generate(Generation("x"))])
    return size, time.perf_counter() - start


def resplit(writes: list[bytes]) -> float:
    """The reader before issue 37, on ``writes`` in memory: its seconds."""
    start = time.perf_counter()
    rest = b""
    for data in writes:
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
    return time.perf_counter() - start


async def table(url: str, stand_in: LongLine, runs: int) -> None:
    engine = RemoteEngine(url)  # one client: its connection is made before the clock starts
    stand_in.writes = [line_of(1024)]
    await read(engine)
    header = f"{'line':>8} {'write':>7} {'writes':>6} {'seconds':>8} {'ms/MiB':>7} {'re-split':>9}"
    print(header)
    print("-" * len(header))
    try:
        for size in (1 * MIB, 4 * MIB, 15 * MIB):
            data = line_of(size)
            for write in (64 * 1024, 4 * 1024):
                stand_in.writes = [data[i : i + write] for i in range(0, len(data), write)]
                best = float("inf")
                for _ in range(runs):
                    got, seconds = await read(engine)
                    best = min(best, seconds)
                    assert got > size - 100, got
                old = resplit(stand_in.writes)  # once: it takes ~25 s on the longest
                print(
                    f"{size // MIB:>5}MiB {write // 1024:>5}Ki {len(stand_in.writes):>6} "
                    f"{best:>8.3f} {best * 1000 / (size / MIB):>7.1f} {old:>8.2f}s"
                )
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run per row")
    args = parser.parse_args()
    stand_in = LongLine()
    with ServerThread(stand_in.app) as thread:
        asyncio.run(table(thread.url + "/v1", stand_in, 1 if args.quick else 3))


if __name__ == "__main__":
    main()
