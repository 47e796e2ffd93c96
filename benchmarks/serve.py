"""Serve benchmark: N concurrent streaming clients through ``chatcodec serve --backend``,
straight to the engine it fronts, and through a bare pass-through relay (the engine's bytes
forwarded by httpx and Starlette on uvicorn, as chatcodec's server is built: the least such a
relay adds), in the same run; then ``chatcodec serve MODEL.gguf`` against llama-cpp-python's
own chat server on the same tiny GGUF.

    python benchmarks/serve.py [--clients 200] [--rounds 1] [--gguf-clients 200] [--no-gguf]

The engine is the tests' stand-in (tests/_standin.py, a real uvicorn server speaking
``/v1/completions``) replaying one Qwen2.5 reply (prose then a tool call, ~1 KB) in chunks of
1-7 characters; ``chatcodec serve examples/chatml-tiny``-style front: the Qwen2.5 template
from ../shared, or examples/chatml-tiny when ../shared is absent. Each process (stand-in,
server) is its own, the clients share this one (httpx, asyncio).

Columns:
  req/s       finished streams per second, all clients together;
  ms/delta    per stream, its time from request to [DONE] over the engine's count of deltas
              (p50, p99): the stand-in's pieces, which every stream of both runs gets in the
              same number (it replays the reply in the same chunks to each);
  out         the deltas a client received per stream (chatcodec writes the pieces of one
              read from the engine as one step: fewer, larger deltas under load);
  added       ms/delta through chatcodec / ms/delta direct, at p50 (goal <= 1.10);
  bad         streams whose deltas did not add up to the reply exactly (lost, duplicated or
              interleaved deltas: must be 0).

The GGUF part writes the tests' tiny random-weight llama GGUF (tests/_llama.py, the ChatML
template of examples/chatml-tiny in its metadata) and serves it twice, one server at a time,
each its own process with one decoding thread and a 2,048-token context: llama-cpp-python's
``python -m llama_cpp.server`` and ``chatcodec serve``. N clients each stream a chat completion
of at most 32 tokens (temperature 0.8, its own seed). Columns as above; ``tok/s`` is the
completion tokens per second the server reported over all clients (llama-cpp-python reports
none in a stream), ``out`` the content deltas per stream (median), ``bad`` counts streams not
shaped as OpenAI's (role first, one finish reason last, then [DONE]) or broken off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SHARED_TEMPLATE = ROOT.parent / "shared" / "chat_templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
PROSE = "The forecast for Paris says sun, 18 degrees, a light wind from the west. " * 8
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
STANDIN = """
import sys, uvicorn
sys.path.insert(0, {root!r})
from tests._standin import StandIn
engine = StandIn(seed=1)
engine.reply = {reply!r}
engine.pace = {pace!r}
fixed = engine.chunks(engine.reply)
engine.chunks = lambda text: fixed  # every stream gets the same pieces
uvicorn.run(engine.app, host="127.0.0.1", port={port}, log_level="error")
"""

# The least any relay built on httpx and Starlette/uvicorn adds: the engine's SSE bytes passed
# through as they arrive, nothing read, decoded or rewritten (the clients read them as direct)
PASSTHROUGH = """
import httpx, uvicorn
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
client = httpx.AsyncClient(timeout=600, limits=limits)


async def completions(request):
    sent = client.build_request(
        "POST", {url!r}, content=await request.body(), headers={{"content-type": "application/json"}}
    )
    response = await client.send(sent, stream=True)

    async def relay():
        try:
            async for data in response.aiter_bytes():
                yield data
        finally:
            await response.aclose()

    return StreamingResponse(relay(), media_type="text/event-stream")


app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
uvicorn.run(app, host="127.0.0.1", port={port}, log_level="error")
"""


def standin_chunks() -> list[str]:
    """The pieces the stand-in replays the reply in (as STANDIN fixes them)."""
    sys.path.insert(0, str(ROOT))
    from tests._standin import StandIn

    return StandIn(seed=1).chunks(PROSE + CALL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(command: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    process = subprocess.Popen(command, env=env, cwd=ROOT)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise SystemExit(f"{command[:3]} did not start") from None
            time.sleep(0.05)


Stream = tuple[float, float, int, bool]  # seconds in all, seconds to the first delta, deltas, ok
BAD: list[str] = []  # the first bad stream's status and last line, printed after its table


async def direct(client: httpx.AsyncClient, url: str) -> Stream:
    body = {"prompt": "x", "stream": True, "max_tokens": 4096}
    start_time, first, deltas, text = time.perf_counter(), 0.0, 0, []
    async with client.stream("POST", url + "/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                for choice in event["choices"]:
                    if choice["text"]:
                        first = first or time.perf_counter() - start_time
                        deltas += 1
                        text.append(choice["text"])
    ok = "".join(text) == PROSE + CALL
    return time.perf_counter() - start_time, first, deltas, ok


async def chat(client: httpx.AsyncClient, url: str) -> Stream:
    body = {"model": "bench", "messages": [{"role": "user", "content": "Weather?"}]}
    body |= {"tools": TOOLS, "stream": True}
    start_time, first, deltas, text, calls = time.perf_counter(), 0.0, 0, [], []
    last = ""
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            last = line or last
            if line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line[6:])
                for choice in event["choices"]:
                    delta = choice["delta"]
                    if delta.get("content") or delta.get("tool_calls"):
                        first = first or time.perf_counter() - start_time
                        deltas += 1
                        text.append(delta.get("content") or "")
                        calls += delta.get("tool_calls") or []
    merged: dict[int, list[str]] = {}  # a call's name, then its argument fragments
    for call in calls:
        function = call["function"]
        merged.setdefault(call["index"], [function.get("name", "")])
        merged[call["index"]].append(function.get("arguments") or "")
    try:
        got = [(parts[0], json.loads("".join(parts[1:]))) for _, parts in sorted(merged.items())]
    except ValueError:
        got = []
    ok = "".join(text) == PROSE and got == [("get_weather", {"city": "Paris"})]
    if not ok and not BAD:
        BAD.append(f"status {response.status_code}, last line {last[:300]!r}")
    return time.perf_counter() - start_time, first, deltas, ok


def _p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.99 * len(values)))]


async def run(kind: str, url: str, clients: int) -> dict[str, float]:
    call = direct if kind == "direct" else chat
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        begin = time.perf_counter()
        results = await asyncio.gather(*(call(client, url) for _ in range(clients)))
        wall = time.perf_counter() - begin
    pieces = len(standin_chunks())
    per_delta = [1000 * t / pieces for t, _, _, _ in results]
    steady = [1000 * (t - first) / (pieces - 1) for t, first, _, _ in results]
    return {
        "req/s": clients / wall,
        "out": statistics.median(n for _, _, n, _ in results),
        "first": statistics.median(1000 * first for _, first, _, _ in results),
        "p50": statistics.median(per_delta),
        "p99": _p99(per_delta),
        "steady": statistics.median(steady),
        "steady99": _p99(steady),
        "bad": sum(1 for _, _, _, ok in results if not ok),
    }


async def gguf_chat(
    client: httpx.AsyncClient, url: str, model: str, seed: int
) -> tuple[float, int, bool, int]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Tell me about Paris."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 32,
        "temperature": 0.8,
        "seed": seed,
    }
    start_time, deltas, events, tokens, done = time.perf_counter(), 0, [], 0, False
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    event = json.loads(line[6:])
                    usage = event.get("usage") or {}
                    tokens = usage.get("completion_tokens") or tokens
                    if event.get("choices"):
                        events.append(event["choices"][0])
                        deltas += bool(event["choices"][0]["delta"].get("content"))
    except httpx.HTTPError:  # a stream the server broke off counts as bad
        done = False
    finishes = [e for e in events if e.get("finish_reason")]
    ok = (
        done
        and bool(events)
        and events[0]["delta"].get("role") == "assistant"
        and len(finishes) == 1
        and finishes[0] is events[-1]
    )
    return time.perf_counter() - start_time, deltas, ok, tokens


async def run_gguf(url: str, model: str, clients: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=None)
    async with httpx.AsyncClient(timeout=1200, limits=limits) as client:
        begin = time.perf_counter()
        results = await asyncio.gather(*(gguf_chat(client, url, model, i) for i in range(clients)))
        wall = time.perf_counter() - begin
    per_delta = sorted(1000 * t / max(n, 1) for t, n, _, _ in results)
    return {
        "req/s": clients / wall,
        "tok/s": sum(r[3] for r in results) / wall,
        "out": statistics.median(r[1] for r in results),
        "p50": statistics.median(per_delta),
        "p99": per_delta[min(len(per_delta) - 1, int(0.99 * len(per_delta)))],
        "bad": sum(1 for r in results if not r[2]),
    }


def gguf_comparison(clients: int, rounds: int) -> None:
    """llama-cpp-python's chat server and ``chatcodec serve`` on the same tiny GGUF."""
    import tempfile

    sys.path.insert(0, str(ROOT))
    from tests._llama import write_chat_model

    template = (ROOT / "examples/chatml-tiny/chat_template.jinja").read_text()
    folder = Path(tempfile.mkdtemp(prefix="chatcodec-bench-"))
    gguf = write_chat_model(
        folder / "tiny.gguf", template, ["<|im_start|>", "<|im_end|>"], "<s>", "<|im_end|>"
    )
    servers = {
        "llama-cpp-python": [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
        + ["--n_ctx", "2048", "--n_threads", "1", "--verbose", "false"]
        # by default a new request interrupts the stream in progress: queue them instead
        + ["--interrupt_requests", "false", "--port"],
        "chatcodec": [sys.executable, "-m", "chatcodec", "serve", str(gguf), "--n-ctx", "2048"]
        + ["--n-threads", "1", "--model-name", str(gguf), "--log-level", "error", "--port"],
    }
    rows = []
    for _ in range(rounds):
        for name, command in servers.items():
            port = free_port()
            server = start([*command, str(port)], port)
            try:
                url = f"http://127.0.0.1:{port}"
                rows.append((name, asyncio.run(run_gguf(url, str(gguf), clients))))
            finally:
                server.terminate()
                server.wait()
    print(f"\n{clients} concurrent streaming chat clients on a tiny GGUF, 32 tokens each")
    print(
        f"{'':17} {'req/s':>8} {'tok/s':>8} {'ms/delta p50':>13} {'p99':>8} {'out':>5} {'bad':>4}"
    )
    for name, row in rows:
        print(
            f"{name:17} {row['req/s']:8.1f} {row['tok/s']:8.1f} {row['p50']:13.3f} "
            f"{row['p99']:8.3f} {row['out']:5.0f} {int(row['bad']):4}"
        )
    ours = statistics.median(r["req/s"] for n, r in rows if n == "chatcodec")
    theirs = statistics.median(r["req/s"] for n, r in rows if n == "llama-cpp-python")
    print(f"chatcodec req/s / llama-cpp-python req/s: {ours / theirs:.2f} (goal >= 1.00)")


def relay_comparison(clients: int, rounds: int, pace_ms: float) -> tuple[float, float]:
    """The clients straight to the stand-in, through a bare pass-through relay, then through
    ``chatcodec serve --backend`` in front of it (the stand-in waiting ``pace_ms`` before
    each piece); chatcodec's added time per delta at p50, over the whole stream and after the
    first delta."""
    reply = PROSE + CALL
    engine_port, serve_port, relay_port = free_port(), free_port(), free_port()
    code = STANDIN.format(root=str(ROOT), reply=reply, port=engine_port, pace=pace_ms / 1000)
    engine = start([sys.executable, "-c", code], engine_port)
    engine_url = f"http://127.0.0.1:{engine_port}"
    code = PASSTHROUGH.format(url=engine_url + "/v1/completions", port=relay_port)
    relay = start([sys.executable, "-c", code], relay_port)
    template = str(SHARED_TEMPLATE if SHARED_TEMPLATE.exists() else ROOT / "examples/chatml-tiny")
    serve = [sys.executable, "-m", "chatcodec", "serve", template, "--model-name", "bench"]
    serve += ["--backend", f"http://127.0.0.1:{engine_port}/v1", "--port", str(serve_port)]
    server = start([*serve, "--log-level", "error"], serve_port)
    try:
        rows = []
        for _ in range(rounds):
            rows.append(("direct", asyncio.run(run("direct", engine_url, clients))))
            relay_url = f"http://127.0.0.1:{relay_port}"
            rows.append(("pass-through", asyncio.run(run("direct", relay_url, clients))))
            serve_url = f"http://127.0.0.1:{serve_port}"
            rows.append(("chatcodec", asyncio.run(run("chat", serve_url, clients))))
    finally:
        for process in (server, relay, engine):
            process.terminate()
            process.wait()
    paced = f", the engine waiting {pace_ms:g} ms before each" if pace_ms else " (no wait)"
    print(
        f"\n{clients} concurrent streaming clients, reply {len(reply)} characters "
        f"in {len(standin_chunks())} pieces{paced}"
    )
    print(
        f"{'':12} {'req/s':>7} {'first ms':>9} {'ms/delta p50':>13} {'p99':>7} "
        f"{'after first p50':>16} {'p99':>7} {'out':>4} {'bad':>4}"
    )
    for name, row in rows:
        print(
            f"{name:12} {row['req/s']:7.1f} {row['first']:9.1f} {row['p50']:13.3f} "
            f"{row['p99']:7.3f} {row['steady']:16.3f} {row['steady99']:7.3f} "
            f"{row['out']:4.0f} {int(row['bad']):4}"
        )

    def ratio(key: str, relay: str = "chatcodec") -> float:
        ours = statistics.median(r[key] for n, r in rows if n == relay)
        return ours / statistics.median(r[key] for n, r in rows if n == "direct")

    if BAD:
        print(f"a bad stream: {BAD.pop()}")
    whole, steady = ratio("p50"), ratio("steady")
    print(
        f"added time per delta (p50): {whole:.2f}x direct over the whole stream, "
        f"{steady:.2f}x after the first delta (goal <= 1.10); a bare pass-through relay: "
        f"{ratio('p50', 'pass-through'):.2f}x, {ratio('steady', 'pass-through'):.2f}x"
    )
    return whole, steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--pace-ms",
        default="0,20,40",
        help="the stand-in's wait before each piece, ms, comma-separated: one table each "
        "(0: as fast as it can; default 0,20,40)",
    )
    parser.add_argument("--gguf-clients", type=int, default=200)
    parser.add_argument("--no-gguf", action="store_true", help="skip the GGUF comparison")
    args = parser.parse_args()
    paces = [float(p) for p in args.pace_ms.split(",") if p.strip()]
    added = {pace: relay_comparison(args.clients, args.rounds, pace) for pace in paces}
    if len(added) > 1:
        print("\nadded time per delta (p50) by engine pace: whole stream, after the first delta")
        for pace, (whole, steady) in added.items():
            print(f"  {pace:6g} ms/piece  {whole:.2f}x  {steady:.2f}x")
    if not args.no_gguf:
        gguf_comparison(args.gguf_clients, args.rounds)


if __name__ == "__main__":
    main()
