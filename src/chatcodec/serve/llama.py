"""LlamaEngine: llama.cpp in this process (llama-cpp-python's low-level API, extra ``llama``).

One sequence is decoded at a time: requests wait their turn in arrival order (an asyncio lock
is first come, first served), and a request cancelled while it waits never reaches the model.
Every call into llama.cpp runs on one worker thread, so a step still running when its request
is cancelled finishes before the next request's first.

A request's grammar is sampled as llama-server samples it: a whole grammar's sampler is first
fed the generation prompt's tokens (its root starts with them); a lazy one waits for its
triggers (word triggers escaped into patterns, ``pattern_full`` anchored, a ``token`` trigger
as its token) and constrains the text from there.
"""

from __future__ import annotations

import asyncio
import codecs
import ctypes
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..llamacpp import library
from .engine import EngineError, EngineRequestError, EngineTimeout, Generation, Piece, Usage
from .stops import StopScanner

__all__ = ["LlamaEngine", "trigger_patterns"]

T = TypeVar("T")
PENALTY_WINDOW = 64  # the tokens a presence/frequency penalty looks back over
_REFUSED_GRAMMAR = (
    "llama.cpp cannot parse the grammar made from this request's tools or response_format "
    "schema (one cause: a bound such as minItems or maxLength that repeats a rule more than "
    "llama.cpp's limit of 2,000 times)"
)


def trigger_patterns(triggers: Any) -> list[str]:
    """The regexes llama.cpp's lazy grammar sampler waits for, as ``common_sampler_init``
    builds them from a request's word, pattern and full-pattern triggers."""
    patterns = []
    for trigger in triggers:
        if trigger.type == "word":
            patterns.append(re.sub(r"[.^$|()*+?\[\]{}\\]", r"\\\g<0>", trigger.value))
        elif trigger.type == "pattern":
            patterns.append(trigger.value)
        elif trigger.type == "pattern_full":
            value = trigger.value
            patterns.append(
                ("" if value.startswith("^") else "^")
                + value
                + ("" if value.endswith("$") else "$")
            )
    return patterns


class _Deadline:
    """``timeout`` seconds from now (None: no limit) for the awaitables ``run`` is given."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.end = None if timeout is None else time.monotonic() + timeout

    async def run(self, work: Awaitable[T], doing: str) -> T:
        if self.end is None:
            return await work
        try:
            return await asyncio.wait_for(work, max(0.0, self.end - time.monotonic()))
        except asyncio.TimeoutError:
            raise EngineTimeout(f"the model took more than {self.timeout:g} s {doing}") from None


@dataclass
class _Job:
    """One generation in progress: its sampler, its text decoder and its counts."""

    sampler: Any
    prompt_tokens: int
    max_tokens: int
    stops: StopScanner
    pending: int | None = None  # the last sampled token, not yet decoded
    count: int = 0
    decoder: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, self.count)


class LlamaEngine:
    """A GGUF model in llama.cpp: ``n_ctx`` tokens of context, ``n_threads`` for decoding;
    ``timeout`` seconds at most for the next piece (the first one's wait in the queue and the
    prompt's decoding included), else `EngineTimeout`."""

    takes_grammar = True

    def __init__(
        self,
        path: str | Path,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        timeout: float | None = None,
    ) -> None:
        llama_cpp = library("the in-process engine")
        self.lib = llama_cpp
        self.n_ctx = n_ctx
        self.timeout = timeout
        self.generations = 0  # how many generations reached the model
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._lock: asyncio.Lock | None = None
        self.model = llama_cpp.llama_model_load_from_file(
            str(path).encode(), llama_cpp.llama_model_default_params()
        )
        if not self.model:
            raise EngineError(f"llama.cpp could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = min(n_ctx, 2048)
        if n_threads is not None:
            params.n_threads = params.n_threads_batch = n_threads
        self.n_batch = params.n_batch
        self.context = llama_cpp.llama_init_from_model(self.model, params)
        if not self.context:
            raise EngineError(f"llama.cpp could not make a context for {path}")

    async def aclose(self) -> None:
        """Free the model (once; a closed engine stays closed)."""
        if self.model is None:
            return
        await self._run(self._free_model)
        self._executor.shutdown()

    def _free_model(self) -> None:
        if self.context:
            self.lib.llama_free(self.context)
            self.context = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def generate(self, request: Generation) -> AsyncIterator[Piece]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        lock = self._lock
        # the wait in the queue and the prompt count against the first piece's time
        deadline = _Deadline(self.timeout)
        await deadline.run(lock.acquire(), "waiting for the model")
        try:  # first come, first served; a cancelled waiter leaves the queue
            start = asyncio.get_running_loop().run_in_executor(self._executor, self._start, request)
            try:  # (shielded: a start that times out still ends, and its sampler is freed)
                job = await deadline.run(asyncio.shield(start), "reading the prompt")
            except EngineTimeout:
                start.add_done_callback(self._free_started)
                raise
            try:
                while True:
                    deadline = _Deadline(self.timeout)
                    piece = await deadline.run(self._run(self._step, job), "generating")
                    yield piece
                    if piece.finish_reason is not None:
                        return
            finally:  # after any step still running: the executor keeps the order
                self._executor.submit(self.lib.llama_sampler_free, job.sampler)
        finally:
            lock.release()

    def _free_started(self, start: asyncio.Future[_Job]) -> None:
        if not start.cancelled() and start.exception() is None:
            self._executor.submit(self.lib.llama_sampler_free, start.result().sampler)

    # ------------------------------------------------------------------ on the worker thread

    def tokenize(self, text: str) -> list[int]:
        """``text``'s tokens, special tokens written in it read as such, no BOS added."""
        data = text.encode("utf-8")
        size = len(data) + 8
        array = (self.lib.llama_token * size)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), array, size, False, True)
        if n < 0:
            array = (self.lib.llama_token * -n)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), array, -n, False, True)
        return list(array[:n])

    def piece(self, token: int) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buffer, 64, 0, True)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buffer, -n, 0, True)
        return buffer.raw[:n]

    def _decode(self, tokens: list[int]) -> None:
        lib = self.lib
        for start in range(0, len(tokens), self.n_batch):
            part = tokens[start : start + self.n_batch]
            array = (lib.llama_token * len(part))(*part)
            if lib.llama_decode(self.context, lib.llama_batch_get_one(array, len(part))) != 0:
                raise EngineError("llama_decode failed")

    def _start(self, request: Generation) -> _Job:
        tokens = self.tokenize(request.prompt)
        if not tokens:
            raise EngineError("the prompt is empty")
        if len(tokens) >= self.n_ctx:  # (at least one token is left for the reply)
            raise EngineRequestError(
                f"this model's context holds {self.n_ctx} tokens, and the messages make a "
                f"prompt of {len(tokens)}: shorten the messages",
                code="context_length_exceeded",
                param="messages",
            )
        self.generations += 1
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.context), True)
        sampler = self._sampler(request)
        try:
            self._decode(tokens)
        except EngineError:
            self.lib.llama_sampler_free(sampler)
            raise
        room = self.n_ctx - len(tokens)
        limit = room if request.max_tokens is None else min(room, request.max_tokens)
        return _Job(sampler, len(tokens), limit, StopScanner(request.stop))

    def _step(self, job: _Job) -> Piece:
        lib = self.lib
        if job.pending is not None:
            self._decode([job.pending])
            job.pending = None
        stops = job.stops
        if job.count >= job.max_tokens:
            text = self._last(job)
            return Piece(text, "stop" if stops.stopped else "length", job.usage())
        token = lib.llama_sampler_sample(job.sampler, self.context, -1)
        if lib.llama_vocab_is_eog(self.vocab, token):
            return Piece(self._last(job), "stop", job.usage())
        job.count += 1
        job.pending = token
        text = stops.feed(job.decoder.decode(self.piece(token)))
        if stops.stopped:  # a stop string ends the generation here, as llama-server's do
            return Piece(text, "stop", job.usage())
        return Piece(text)

    @staticmethod
    def _last(job: _Job) -> str:
        """The text the decoder and the stop strings still held when the generation ended."""
        stops = job.stops
        text = stops.feed(job.decoder.decode(b"", True))
        return text if stops.stopped else text + stops.finish()

    def _sampler(self, request: Generation) -> Any:
        """The sampler chain: the grammar first, then penalties, top-k, top-p, min-p (in
        llama-server's order, each only when the request sets it), temperature and the draw
        (greedy at temperature 0)."""
        lib = self.lib
        # (the grammar's first: one llama.cpp refuses leaves no chain to free)
        grammar = None if request.grammar is None else self._grammar_sampler(request.grammar)
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if grammar is not None:
            lib.llama_sampler_chain_add(chain, grammar)
        presence = request.presence_penalty or 0.0
        frequency = request.frequency_penalty or 0.0
        if presence or frequency:
            # the binding declares a leading vocabulary size the C function no longer takes;
            # the window in both integer slots is right under either signature
            lib.llama_sampler_chain_add(
                chain,
                lib.llama_sampler_init_penalties(
                    PENALTY_WINDOW, PENALTY_WINDOW, 1.0, frequency, presence
                ),
            )
        temperature = 1.0 if request.temperature is None else request.temperature
        if temperature <= 0.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            return chain
        if request.top_k is not None and request.top_k > 0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(request.top_k))
        if request.top_p is not None and request.top_p < 1.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(request.top_p, 1))
        if request.min_p is not None and request.min_p > 0.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(request.min_p, 1))
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(temperature))
        seed = request.seed if request.seed is not None else random.getrandbits(32)
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _grammar_sampler(self, grammar: Any) -> Any:
        lib = self.lib
        gbnf = grammar.gbnf.encode("utf-8")
        if not grammar.lazy:
            sampler = lib.llama_sampler_init_grammar(self.vocab, gbnf, b"root")
            if not sampler:
                raise EngineRequestError(_REFUSED_GRAMMAR)
            for token in self.tokenize(grammar.generation_prompt):
                lib.llama_sampler_accept(sampler, token)
            return sampler
        patterns = trigger_patterns(grammar.triggers)
        tokens = []
        for trigger in grammar.triggers:
            if trigger.type == "token":
                ids = self.tokenize(trigger.value)
                if len(ids) == 1:
                    tokens.append(ids[0])
                else:  # not one token in this vocabulary: waited for as its text
                    patterns.append(re.escape(trigger.value))
        words = (ctypes.c_char_p * len(patterns))(*(p.encode("utf-8") for p in patterns))
        ids = (lib.llama_token * len(tokens))(*tokens)
        sampler = lib.llama_sampler_init_grammar_lazy_patterns(
            self.vocab, gbnf, b"root", words, len(patterns), ids, len(tokens)
        )
        if not sampler:
            raise EngineRequestError(_REFUSED_GRAMMAR)
        return sampler
