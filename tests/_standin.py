"""A real HTTP engine stand-in on loopback, and a thread that serves an ASGI app on loopback.

`StandIn` speaks OpenAI's ``/v1/completions`` (streaming and not): it replays the reply text
the test sets, in chunks of seeded varying sizes, cut at the request's stop strings as
engines cut them. It records every request body, can answer with an error status, and in
``endless`` mode streams text, ``stall`` mode only SSE comments, until the client goes away
(``closed`` is set then, as it is when a stream ends); ``delay`` waits before answering;
``pace`` waits before each streamed piece (an engine's time per token).
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["StandIn", "ServerThread"]


class ServerThread:
    """``app`` served by uvicorn on 127.0.0.1 in a thread; ``url`` once started."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            threading.Event().wait(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()


class StandIn:
    """The engine stand-in: ``reply`` (text, or ``body -> text``) is what every request gets."""

    def __init__(self, seed: int = 0) -> None:
        self.reply: str | Callable[[dict[str, Any]], str] = ""
        self.requests: list[dict[str, Any]] = []
        self.peers: list[tuple[str, int]] = []  # the connection (host, port) of each request
        self.rng = random.Random(seed)
        self.max_chunk = 7
        self.status = 200  # another status: answer with an error of that status
        self.echo_stops = False  # replay the stop string too, as some engines do
        self.endless = False
        self.stall = False  # stream nothing but SSE comments until the client goes away
        self.delay = 0.0  # seconds to wait before answering
        self.pace = 0.0  # seconds to wait before each streamed piece
        self.closed = threading.Event()
        self.app = Starlette(routes=[Route("/v1/completions", self.completions, methods=["POST"])])

    def chunks(self, text: str) -> list[str]:
        out, i = [], 0
        while i < len(text):
            size = self.rng.randint(1, self.max_chunk)
            out.append(text[i : i + size])
            i += size
        return out

    def text(self, body: dict[str, Any]) -> tuple[str, str]:
        """The reply to ``body``, cut at its first stop string, or else after ``max_tokens``
        characters (a character a token: ``length``), and why it ended."""
        text = self.reply(body) if callable(self.reply) else self.reply
        stops = body.get("stop") or []
        found = [(text.find(s), s) for s in stops if s and s in text]
        limit = body.get("max_tokens")
        if not found:
            if isinstance(limit, int) and 0 <= limit < len(text):
                return text[:limit], "length"
            return text, "stop"
        cut, stop = min(found)
        return text[: cut + (len(stop) if self.echo_stops else 0)], "stop"

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if request.client is not None:
            self.peers.append((request.client.host, request.client.port))
        if self.delay and not body.get("stream"):
            await asyncio.sleep(self.delay)
        if self.status != 200:
            error = {"message": "the stand-in fails on purpose", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=self.status)
        text, reason = self.text(body)
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(text)}
        if not body.get("stream"):
            choice = {"index": 0, "text": text, "finish_reason": reason}
            return JSONResponse({"object": "text_completion", "choices": [choice], "usage": usage})
        return StreamingResponse(self.events(text, reason, usage), media_type="text/event-stream")

    async def events(self, text: str, reason: str, usage: dict[str, int]) -> AsyncIterator[str]:
        try:
            if self.delay:  # the client may go away while it waits
                await asyncio.sleep(self.delay)
            while self.stall:
                yield ": waiting\n\n"
                await asyncio.sleep(0.01)
            if self.endless:
                while True:
                    yield _event({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})
                    await asyncio.sleep(0.001)
            for chunk in self.chunks(text):
                if self.pace:
                    await asyncio.sleep(self.pace)
                yield _event({"choices": [{"index": 0, "text": chunk, "finish_reason": None}]})
            yield _event({"choices": [{"index": 0, "text": "", "finish_reason": reason}]})
            yield _event({"choices": [], "usage": usage})
            yield "data: [DONE]\n\n"
        finally:
            self.closed.set()


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"
