"""RemoteEngine: an engine behind OpenAI's ``/v1/completions`` (a ``prompt`` string in, text
out), as vLLM, SGLang, llama.cpp's server, LM Studio and Ollama serve it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from ..errors import GrammarError
from .engine import EngineError, EngineReplyError, EngineTimeout, Generation, Piece, Usage

if TYPE_CHECKING:
    from ..grammar.constraint import Grammar

__all__ = ["RemoteEngine", "BACKEND_KINDS", "MAX_LINE"]

MAX_LINE = 16 * 1024 * 1024
"""The longest line of an engine's SSE stream, and the largest whole answer, in bytes: more is
an engine fault (`EngineReplyError`: a 502, or an error event once a stream has begun). An
event carries a few tokens, so a line of 16 MiB is far beyond any engine's own."""

BackendKind = Literal["llama", "llama-cpp-python", "vllm", "sglang", "none"]
BACKEND_KINDS: tuple[BackendKind, ...] = ("llama", "llama-cpp-python", "vllm", "sglang", "none")


class RemoteEngine:
    """``base_url`` is the engine's OpenAI root (``http://HOST:PORT/v1``); ``kind`` says how
    a grammar is sent (llama.cpp's server, llama-cpp-python's, vLLM's or SGLang's request
    fields; ``none``: the engine takes no grammar). ``stream=False`` asks for whole
    completions instead of SSE. ``keep_alive``: the seconds an idle connection to the engine
    is kept for the next request; keep it under the engine's own (5 s for vLLM's, SGLang's
    and llama.cpp's servers): a connection the engine closes as it is taken again fails the
    request that took it, and under a burst of requests the server learns of the close late."""

    def __init__(
        self,
        base_url: str,
        kind: BackendKind = "none",
        model: str | None = None,
        timeout: float = 600.0,
        stream: bool = True,
        api_key: str | None = None,
        max_tokens_default: int | None = None,
        keep_alive: float = 3.0,
    ) -> None:
        if kind not in BACKEND_KINDS:
            raise ValueError(f"backend kind must be one of {BACKEND_KINDS}, not {kind!r}")
        try:
            url = httpx.URL(base_url)
        except httpx.InvalidURL as exc:
            raise ValueError(f"the engine's URL {base_url!r} is not a URL: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(
                f"the engine's URL must be http:// or https:// with a host: {base_url!r}"
            )
        if kind == "sglang" and max_tokens_default is None:
            raise ValueError(
                "SGLang's /v1/completions gives 16 tokens unless told more and takes no null: "
                "give a default max_tokens (--max-tokens-default)"
            )
        self.max_tokens_default = max_tokens_default
        self.url = base_url.rstrip("/") + "/completions"
        self.kind = kind
        self.model = model
        self.stream = stream
        self.takes_grammar = kind != "none"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None

        # httpx's client on aiohttp's transport: aiohttp reads HTTP in C where httpcore
        # reads it in Python (41% of the server's CPU under load, benchmarks/README.md).
        # The session is made at the first request, inside the server's event loop, with
        # no limit on connections (a stream holds one); the engine is reached directly:
        # reading HTTP(S)_PROXY and ~/.netrc again for every request cost more than the
        # rest of sending it
        def session() -> aiohttp.ClientSession:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=keep_alive)
            return aiohttp.ClientSession(connector=connector, trust_env=False)

        transport = AiohttpTransport(client=session)
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout), headers=headers, transport=transport
        )

    async def aclose(self) -> None:
        await self.client.aclose()

    def body(self, request: Generation) -> dict[str, Any]:
        """The ``/v1/completions`` request body; ``GrammarError`` when the grammar cannot be
        written in this engine's fields."""
        body: dict[str, Any] = {"prompt": request.prompt, "stream": self.stream}
        if self.model is not None:
            body["model"] = self.model
        body["max_tokens"] = (
            self.max_tokens_default if request.max_tokens is None else request.max_tokens
        )
        for name in ("temperature", "top_p", "top_k", "min_p", "seed"):
            value = getattr(request, name)
            if value is not None:
                body[name] = value
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(request, name)
            if value:
                body[name] = value
        stop = list(request.stop)
        if request.grammar is not None and self.kind != "none":
            fields = _grammar_fields(request, self.kind)
            stop += [s for s in fields.pop("stop", ()) if s not in stop]
            body.update(fields)
        if stop:
            body["stop"] = stop
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def check_grammar(self, grammar: Grammar) -> None:
        """``GrammarError`` when ``grammar`` cannot be written in this engine's fields (a lazy
        grammar woken by a regular expression, for vLLM and SGLang; any lazy grammar, for
        llama-cpp-python)."""
        if self.kind != "none":
            _grammar_fields(Generation("", grammar=grammar), self.kind)

    async def generate(self, request: Generation) -> AsyncIterator[Piece]:
        try:
            body = self.body(request)
        except GrammarError as exc:
            raise EngineError(f"the engine cannot take this grammar: {exc}") from exc
        try:
            async with self.client.stream("POST", self.url, json=body) as response:
                if response.status_code != 200:
                    raise EngineError(_failure(response.status_code, await _read(response)))
                if self.stream:
                    async for piece in _sse_pieces(response):
                        yield piece
                else:
                    yield _whole_piece(_json(await _read(response)))
        except (httpx.TimeoutException, TimeoutError) as exc:
            if _timed_out(exc):
                raise EngineTimeout(f"the engine at {self.url} did not answer in time") from exc
            raise EngineError(f"the engine at {self.url} failed: {exc.__cause__!r}") from exc
        except (httpx.HTTPError, aiohttp.ClientError) as exc:
            raise EngineError(f"the engine at {self.url} failed: {exc!r}") from exc


def _timed_out(exc: Exception) -> bool:
    """Whether ``exc`` is a timeout: the aiohttp transport names every failure to connect
    (a refused connection too) httpx's ConnectTimeout, its cause says which it was."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return isinstance(cause, aiohttp.ServerTimeoutError)
    return True


def _grammar_fields(request: Generation, kind: str) -> dict[str, Any]:
    grammar = request.grammar
    assert grammar is not None
    if kind == "llama":
        return grammar.llama_server_fields()
    if kind == "llama-cpp-python":
        return grammar.llama_cpp_python_fields()
    if kind == "vllm":
        return grammar.vllm_fields()
    if kind == "sglang":
        return grammar.sglang_fields()
    raise GrammarError(f"a {kind!r} engine takes no grammar")


def _failure(status: int, data: bytes) -> str:
    try:
        message = orjson.loads(data)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = data.decode("utf-8", "replace")
    return f"the engine answered {status}: {_clip(message)}"


def _clip(message: Any) -> str:
    """The engine's own message, as much of it as an error message carries."""
    text = str(message)
    return text if len(text) <= 500 else text[:500] + "..."


async def _read(response: httpx.Response) -> bytes:
    """The body of a response that is not a stream, at most `MAX_LINE` bytes."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > MAX_LINE:
            raise EngineReplyError(
                f"the engine's answer (HTTP {response.status_code}) is longer than {MAX_LINE} bytes"
            )
    return bytes(data)


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)  # (a sixth of json.loads's cost, on every event)
    except ValueError as exc:
        raise EngineReplyError(f"the engine sent something that is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise EngineReplyError("the engine sent JSON that is not an object")
    if "error" in value:
        error = value["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise EngineError(f"the engine reported an error: {_clip(message)}")
    return value


def _usage(value: Any) -> Usage | None:
    """An event's ``usage``: none when it is absent or null, or when it leaves a count out."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise EngineReplyError("the engine sent a usage that is not an object")
    prompt, completion = value.get("prompt_tokens"), value.get("completion_tokens")
    if prompt is None or completion is None:
        return None
    if not (_count(prompt) and _count(completion)):
        raise EngineReplyError("the engine sent token counts that are not whole numbers >= 0")
    return Usage(prompt, completion)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice(event: dict[str, Any]) -> tuple[str, str | None]:
    """The text and finish reason of an event's first choice; an event without choices
    (``[]``, null or none: a usage chunk) has neither."""
    choices = event.get("choices")
    if choices is None:
        return "", None
    if not isinstance(choices, list):
        raise EngineReplyError("the engine sent choices that are not a list")
    if not choices:
        return "", None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise EngineReplyError("the engine sent a choice that is not an object")
    text = choice.get("text")
    reason = choice.get("finish_reason")
    if not isinstance(text, str | None):
        raise EngineReplyError("the engine sent a choice whose text is not a string")
    if not isinstance(reason, str | None):
        raise EngineReplyError("the engine sent a finish reason that is not a string")
    return text or "", _reason(reason)


def _reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    return "length" if reason == "length" else "stop"


def _whole_piece(event: dict[str, Any]) -> Piece:
    if not event.get("choices"):
        raise EngineReplyError("the engine's completion has no choices")
    text, reason = _choice(event)
    return Piece(text, reason or "stop", _usage(event.get("usage")))


async def _sse_pieces(response: httpx.Response) -> AsyncIterator[Piece]:
    """The pieces of an SSE completion stream: the text of the events that arrived in one read
    is one piece (nothing waits to be merged: under load, one decoder step and one write to
    the client instead of several); the finish reason and usage (which engines send in the
    last choice chunk or in a chunk of their own) go on one last piece. ``data: [DONE]`` ends
    the stream: what the engine sends after it is not read."""
    stream = _EventLines()
    lines = _Lines()
    async for data in response.aiter_bytes():
        text = stream.read(lines.feed(data))
        if text:
            yield Piece(text)
        if stream.done:
            break
    text = "" if stream.done else stream.read(lines.end())
    if text:
        yield Piece(text)
    if stream.reason is None:
        raise EngineReplyError("the engine's stream ended without a finish reason")
    yield Piece("", stream.reason, stream.usage)


class _Lines:
    r"""Bytes as they arrive, cut into lines (ended by ``\n`` or ``\r\n``): only the bytes of
    each read are searched for the end of a line, and a line longer than `MAX_LINE` bytes is
    an engine fault, so that a long line costs its length once, whatever its reads."""

    def __init__(self) -> None:
        self.partial = bytearray()  # the start of a line whose end has not come yet

    def feed(self, data: bytes) -> list[bytes]:
        """The lines that ``data`` completes."""
        end = data.rfind(b"\n")
        if end < 0:
            self.partial += data
            self._check(len(self.partial))
            return []
        lines = data[:end].split(b"\n")
        lines[0] = bytes(self.partial) + lines[0]
        self.partial = bytearray(data[end + 1 :])
        self._check(max(map(len, lines)))
        self._check(len(self.partial))
        return lines

    def end(self) -> list[bytes]:
        """The last line, which no newline ended."""
        return [bytes(self.partial)] if self.partial else []

    @staticmethod
    def _check(length: int) -> None:
        if length > MAX_LINE:
            raise EngineReplyError(f"the engine sent a line longer than {MAX_LINE} bytes")


class _EventLines:
    """The SSE lines of a completion stream, read a batch at a time: ``data:`` lines are the
    events (one JSON object each); comments, blank lines and other fields are passed over."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.usage: Usage | None = None
        self.done = False

    def read(self, lines: list[bytes]) -> str:
        """The text of the events in ``lines``, noting the finish reason and usage."""
        texts = []
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                break
            event = _json(payload)
            text, finished = _choice(event)
            self.usage = _usage(event.get("usage")) or self.usage
            self.reason = finished or self.reason
            if text:
                texts.append(text)
        return "".join(texts)
