"""The ASGI app: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``; and the
same turn in the agents' APIs: ``POST /v1/responses`` (OpenAI), ``POST /v1/messages`` and
``/v1/messages/count_tokens`` (Anthropic)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import anyio
import orjson
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..errors import ChatCodecError, ReplyError
from ..reply.message import Delta
from ..reply.request import Policy
from . import anthropic, responses
from .chat import Reply, prepare
from .engine import Engine, EngineError, Generation, Piece
from .errors import APIError, error_body, failure
from .schema import ChatRequest, validated

if TYPE_CHECKING:
    from ..codec import Codec
    from ..reply.turn import Turn

__all__ = ["ServeConfig", "create_app"]

log = logging.getLogger("chatcodec.serve")

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
_WARM_MESSAGE = {"role": "user", "content": "Hello."}
_WARM_TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
ReasoningField = Literal["reasoning_content", "reasoning", "both"]


@dataclass(frozen=True)
class ServeConfig:
    """``model_name``: the id ``/v1/models`` reports and requests name. ``api_key``: the
    bearer token every ``/v1`` request must carry (none: open). ``max_body``: the largest
    request body, in bytes. ``reasoning_field``: the name the reasoning goes out under.
    ``policy``: how replies are read and constrained when the request does not say (its
    ``policy`` field): ``guaranteed`` or llama.cpp's ``reference`` (docs/decoding.md).
    ``timeout``: the longest a request's setup (its render, decoder and grammar) may take,
    in seconds (None: no limit), else a 504. ``body_timeout``: the longest a request's
    body may take to arrive, in seconds (None: no limit), else a 408.
    ``max_tokens_default``: the limit of a request that sets none (none: the context's)."""

    model_name: str
    api_key: str | None = None
    max_body: int = 8 * 1024 * 1024
    reasoning_field: ReasoningField = "reasoning_content"
    policy: Policy = "guaranteed"
    max_tokens_default: int | None = None
    timeout: float | None = None
    body_timeout: float | None = 30.0


def create_app(codec: Codec, engine: Engine, config: ServeConfig) -> Starlette:
    """The server's app for one model: ``codec`` renders and reads, ``engine`` generates."""
    server = _Server(codec, engine, config)
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/v1/chat/completions", server.chat, methods=["POST"]),
        Route("/v1/messages", server.messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", server.count_tokens, methods=["POST"]),
        Route("/v1/responses", server.responses, methods=["POST"]),
    ]
    handlers: Mapping[Any, Any] = {
        APIError: _api_error,
        HTTPException: _http_error,
        Exception: _internal_error,
    }

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await asyncio.to_thread(server.warm)
        await anyio.sleep(0)  # loads anyio's event loop backend, which httpx and Starlette use
        yield
        await engine.aclose()

    return Starlette(routes=routes, exception_handlers=dict(handlers), lifespan=lifespan)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    # a body left unread (too large, too slow) ends the connection: the client cannot go on
    # trickling the rest into it
    headers = {"Connection": "close"} if exc.status in (408, 413) else None
    if anthropic.speaks(request.url.path):
        body = anthropic.error_body(exc.status, exc.message)
        return JSONResponse(body, status_code=exc.status, headers=headers)
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, exc.detail)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error")
    return _error(request, 500, _bug_message(exc))


def _bug_message(exc: Exception) -> str:
    return f"internal error (a bug in chatcodec: please report it): {type(exc).__name__}"


def _error(request: Request, status: int, message: str) -> Response:
    """An error answer in the shape of the API the request's path speaks."""
    if anthropic.speaks(request.url.path):
        return JSONResponse(anthropic.error_body(status, message), status_code=status)
    return JSONResponse(error_body(status, message), status_code=status)


class _Server:
    def __init__(self, codec: Codec, engine: Engine, config: ServeConfig) -> None:
        self.codec = codec
        self.engine = engine
        self.config = config
        self.created = int(time.time())
        self.store = responses.Store()

    def warm(self) -> None:
        """Prepare two small requests (without tools and with one) and read a reply to each,
        before the server takes connections: the template's compiling and the decoder's
        modules are loaded then, not on the first client's time (~0.2 s). A template that
        refuses them is fine: the clients' own requests will say why."""
        for tools in (None, [_WARM_TOOL]):
            body = {"model": self.config.model_name, "messages": [_WARM_MESSAGE], "tools": tools}
            try:
                turn, _ = prepare(self.codec, ChatRequest.model_validate(body), self.engine)
                stream = turn.stream()
                stream.feed("Hello.")
                stream.finish()
            except (APIError, ChatCodecError) as exc:
                log.debug("warm-up request refused: %s", exc)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        model = {
            "id": self.config.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "chatcodec",
        }
        return JSONResponse({"object": "list", "data": [model]})

    def _authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if "x-api-key" in request.headers:  # Anthropic's clients send the key so
            scheme, token = "bearer", request.headers["x-api-key"]
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), key):
            raise APIError(401, "missing or wrong API key", code="invalid_api_key")

    async def _body(self, request: Request, schema: type[M]) -> M:
        """The request's body, validated by ``schema``."""
        limit = self.config.max_body
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes")
        timeout = self.config.body_timeout
        try:
            data = await asyncio.wait_for(_read(request, limit), timeout)
        except asyncio.TimeoutError:
            raise APIError(408, f"the request body did not arrive within {timeout:g} s") from None
        except ClientDisconnect:  # one line, no traceback: a client may always go away
            client = request.client
            who = f"{client.host}:{client.port}" if client else "a client"
            log.info("%s went away before sending the whole request body", who)
            raise APIError(499, "the client went away") from None
        try:
            payload = json.loads(data)
        except RecursionError:
            raise APIError(400, "the request body nests too deeply") from None
        except ValueError as exc:  # malformed JSON, invalid UTF-8, an integer too long
            raise APIError(400, f"the request body is not valid JSON: {exc}") from None
        return validated(schema, payload)

    async def chat(self, request: Request) -> Response:
        self._authorize(request)
        body = await self._body(request, ChatRequest)
        reply, pieces = await self._begin(request, body)
        ident = f"chatcmpl-{secrets.token_hex(12)}"
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            events = _Events(self, ident, reply, include_usage)
            return _streamed(events.run(pieces))
        work = asyncio.ensure_future(self._complete(ident, reply, pieces))
        return JSONResponse(await _unless_gone(request, work))

    async def messages(self, request: Request) -> Response:
        """Anthropic's ``/v1/messages``: the chat turn its request means, written its way."""
        self._authorize(request)
        body = await self._body(request, anthropic.MessagesRequest)
        log.debug("/v1/messages with %s", sorted(body.model_fields_set))
        chat = anthropic.to_chat(body)
        reply, pieces = await self._begin(request, chat, anthropic.call_ids())
        writer = anthropic.Writer(self.config.model_name, reply, body.stop_sequences)
        if body.stream:
            return _streamed(writer.events(pieces))
        return JSONResponse(
            await _unless_gone(request, asyncio.ensure_future(writer.whole(pieces)))
        )

    async def responses(self, request: Request) -> Response:
        """OpenAI's ``/v1/responses``: the chat turn its request means, written its way."""
        self._authorize(request)
        body = await self._body(request, responses.ResponsesRequest)
        log.debug("/v1/responses with %s", sorted(body.model_fields_set))
        messages = responses.conversation(body, self.store)
        chat = responses.to_chat(body, messages)
        reply, pieces = await self._begin(request, chat)
        writer = responses.Writer(body, self.config.model_name, reply, messages, self.store)
        if body.stream:
            return _streamed(writer.events(pieces))
        return JSONResponse(
            await _unless_gone(request, asyncio.ensure_future(writer.whole(pieces)))
        )

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's ``/v1/messages/count_tokens``: the prompt's tokens, as the engine
        counts them (its tokenizer, else the usage of a one-token generation)."""
        self._authorize(request)
        body = await self._body(request, anthropic.CountRequest)
        _, generation = await self._prepare(anthropic.to_chat(body))
        count = getattr(self.engine, "count_tokens", None)
        if count is not None:
            return JSONResponse({"input_tokens": await count(generation.prompt)})
        probe = Generation(generation.prompt, max_tokens=1)
        usage = None
        try:
            async for piece in self.engine.generate(probe):
                usage = piece.usage or usage
        except EngineError as exc:
            raise failure(exc) from None
        if usage is None:
            raise APIError(502, "the engine does not count the prompt's tokens")
        return JSONResponse({"input_tokens": usage.prompt_tokens})

    async def _prepare(
        self, body: ChatRequest, call_ids: Callable[[int], str] | None = None
    ) -> tuple[Turn, Generation]:
        """The turn ``body`` asks of this server's model, and what to ask the engine.
        ``prepare`` runs on a worker thread, so that no request's setup holds up the event
        loop (the other streams, ``/health``), within ``timeout``: a setup that takes longer
        is answered with a 504 (its thread runs on to its end, unheard)."""
        if body.model != self.config.model_name:
            raise APIError(
                404,
                f"the model {body.model!r} does not exist; this server serves "
                f"{self.config.model_name!r}",
                "model",
                "model_not_found",
            )
        policy = body.policy or self.config.policy
        work = asyncio.to_thread(prepare, self.codec, body, self.engine, policy, call_ids)
        timeout = self.config.timeout
        try:
            turn, generation = await asyncio.wait_for(work, timeout)
        except asyncio.TimeoutError:
            raise APIError(504, f"setting the request up took more than {timeout:g} s") from None
        if generation.max_tokens is None:
            generation = replace(generation, max_tokens=self.config.max_tokens_default)
        return turn, generation

    async def _begin(
        self, request: Request, body: ChatRequest, call_ids: Callable[[int], str] | None = None
    ) -> tuple[Reply, AsyncIterator[Piece]]:
        """The reply to ``body`` begun: its reader, and the engine's pieces once the first
        came (an engine that fails at once is a status, not a stream)."""
        turn, generation = await self._prepare(body, call_ids)
        reply = Reply(turn, generation.stop, streamed=body.stream)
        pieces = self.engine.generate(generation)
        first = await _unless_gone(request, asyncio.ensure_future(_first(pieces)))
        return reply, _chain(first, pieces)

    async def _complete(
        self, ident: str, reply: Reply, pieces: AsyncIterator[Piece]
    ) -> dict[str, Any]:
        try:
            async for _ in reply.deltas(pieces):
                pass
        except (ReplyError, EngineError) as exc:
            raise failure(exc) from None
        assert reply.message is not None
        message = self.reasoning(reply.message.to_openai())
        out: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if reply.usage is not None:
            out["usage"] = reply.usage.to_openai()
        return out

    def reasoning(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the reasoning under the configured name(s)."""
        name = self.config.reasoning_field
        if name == "reasoning_content" or "reasoning_content" not in fields:
            return fields
        text = fields["reasoning_content"]
        if name == "reasoning":
            fields = {
                ("reasoning" if k == "reasoning_content" else k): v for k, v in fields.items()
            }
        else:
            fields["reasoning"] = text
        return fields


async def _read(request: Request, limit: int) -> bytearray:
    """The request's body; a 413 once it holds more than ``limit`` bytes."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise APIError(413, f"the request body is larger than {limit} bytes")
    return data


def _streamed(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _unless_gone(request: Request, work: asyncio.Future[T]) -> T:
    """``work``'s result; ``work`` cancelled (and the engine's generation with it) when the
    client disconnects first."""
    watch: asyncio.Future[Any] = asyncio.ensure_future(_disconnect(request))
    both: set[asyncio.Future[Any]] = {work, watch}
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not work.done():
            work.cancel()
    if not work.done() or work.cancelled():
        raise APIError(499, "the client went away")
    return work.result()


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (the body was read: what comes next is the end)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _first(pieces: AsyncIterator[Piece]) -> Piece | None:
    try:
        return await pieces.__anext__()
    except StopAsyncIteration:
        return None
    except EngineError as exc:
        raise failure(exc) from None


async def _chain(first: Piece | None, pieces: AsyncIterator[Piece]) -> AsyncIterator[Piece]:
    try:
        if first is None:
            return
        yield first
        async for piece in pieces:
            yield piece
    finally:
        close = getattr(pieces, "aclose", None)
        if close is not None:
            await close()


class _Events:
    """The SSE events of one streamed completion."""

    def __init__(self, server: _Server, ident: str, reply: Reply, include_usage: bool) -> None:
        self.server = server
        self.reply = reply
        self.include_usage = include_usage
        self.head = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": server.config.model_name,
        }
        # every delta chunk is this head, its delta, this tail: written once, not per delta
        opening = orjson.dumps({**self.head, "choices": [{"index": 0, "delta": None}]})
        self._before = b"data: " + opening[: opening.rindex(b"null")]
        self._after = b',"logprobs":null,"finish_reason":null}]}\n\n'

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return _event({**self.head, "choices": [choice]})

    def deltas(self, deltas: list[Delta]) -> bytes:
        """The chunks of ``deltas``, as one write."""
        out = []
        for delta in deltas:
            fields = delta.to_openai()
            fields.pop("role", None)
            if fields:
                body = orjson.dumps(self.server.reasoning(fields))
                out.append(self._before + body + self._after)
        return b"".join(out)

    async def run(self, pieces: AsyncIterator[Piece]) -> AsyncIterator[bytes]:
        yield self.chunk({"role": "assistant", "content": None})
        reply = self.reply
        try:
            async for deltas in reply.deltas(pieces):
                events = self.deltas(deltas)
                if events:
                    yield events
        except (ReplyError, EngineError) as exc:
            yield _event(failure(exc).body())
        except Exception as exc:  # a bug: the stream still ends in its shape
            log.exception("internal error")
            yield _event(error_body(500, _bug_message(exc)))
        else:
            yield self.chunk({}, reply.finish_reason)
            if self.include_usage:
                usage = reply.usage.to_openai() if reply.usage is not None else None
                yield _event({**self.head, "choices": [], "usage": usage})
        yield b"data: [DONE]\n\n"


def _event(payload: dict[str, Any]) -> bytes:
    # (orjson: a stream's events are written at about a tenth of json.dumps's cost)
    return b"data: " + orjson.dumps(payload) + b"\n\n"
