"""Drive vLLM's chat-endpoint parsing as its server does, for the plugin tests and the benchmark.

A corpus case becomes vLLM's own ``ChatCompletionRequest``; vLLM's ``ParserManager`` composes
the parsers named on its command line into the ``Parser`` its chat endpoint makes per request;
a finished reply goes through ``Parser.parse`` and ``assemble_chat_message_fields`` (the
non-streaming response), a streamed one through ``ChatStreamProcessor.step`` chunk by chunk
(the streaming response), and its deltas are added up as a client adds them.

The tokenizer is a stand-in that has what the parsers read from a Hugging Face tokenizer: the
chat template and the BOS/EOS text (vLLM's own parsers also read ``get_vocab``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm.entrypoints.openai.chat_completion.message_assembly import (
    assemble_chat_message_fields,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.stream_processor import ChatStreamProcessor
from vllm.parser import ParserManager
from vllm.parser.abstract_parser import Parser

__all__ = [
    "Tokenizer",
    "vllm_request",
    "parser_class",
    "finished",
    "streamed",
    "random_cuts",
    "every_final_output",
    "Reply",
]


@dataclass
class Tokenizer:
    """What a parser may read of vLLM's tokenizer: the template, BOS/EOS, the vocabulary."""

    chat_template: str
    bos_token: str = ""
    eos_token: str = ""
    vocab: dict[str, int] = field(default_factory=dict)
    # what vLLM's parsers read of a Hugging Face tokenizer's configuration (Hy3's token_suffix)
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    # the text tokens tokenize() made up, apart from the vocabulary (whose entries are markers)
    text_ids: dict[str, int] = field(default_factory=dict)

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.tokenize(text)[1]

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.vocab.get(token)

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        names = {i: t for t, i in (*self.vocab.items(), *self.text_ids.items())}
        return "".join(names.get(i, "") for i in ids)

    def tokenize(self, text: str, width: int = 3) -> tuple[list[str], list[int]]:
        """``text`` as an engine's tokens: each vocabulary entry (the markers) one token,
        the text between them in tokens of ``width`` characters; the token texts and ids."""
        markers = sorted((t for t in self.vocab if t), key=len, reverse=True)
        pieces: list[str] = []
        at = plain = 0
        while at < len(text):
            marker = next((m for m in markers if text.startswith(m, at)), None)
            if marker is None and at - plain < width:
                at += 1
                continue
            if at > plain:
                pieces.append(text[plain:at])
            if marker is not None:
                pieces.append(marker)
                at += len(marker)
            plain = at
        if plain < len(text):
            pieces.append(text[plain:])
        ids = [
            self.vocab[piece]
            if piece in self.vocab
            else self.text_ids.setdefault(piece, 1_000_000 + len(self.text_ids))
            for piece in pieces
        ]
        return pieces, ids


def _wire(message: dict[str, Any]) -> dict[str, Any]:
    """A history message as OpenAI's wire has it: call arguments as JSON text."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    wired = []
    for call in calls:
        function = dict(call["function"])
        if not isinstance(function.get("arguments"), str):
            function["arguments"] = json.dumps(function.get("arguments"), ensure_ascii=False)
        wired.append({**call, "function": function})
    return {**message, "tool_calls": wired}


def vllm_request(case: dict[str, Any]) -> ChatCompletionRequest:
    """The corpus case as a client sends it to vLLM's ``/v1/chat/completions``."""
    body: dict[str, Any] = {"model": "m", "messages": [_wire(m) for m in case["messages"]]}
    if case.get("tools"):
        body["tools"] = case["tools"]
        body["tool_choice"] = case["tool_choice"]
        body["parallel_tool_calls"] = case["parallel_tool_calls"]
    body["chat_template_kwargs"] = {
        "enable_thinking": case["enable_thinking"],
        **(case.get("chat_template_kwargs") or {}),
    }
    return ChatCompletionRequest.model_validate(body)


def parser_class(tool: str | None, reasoning: str | None, tokenizer: Any) -> type[Parser]:
    """The Parser vLLM's chat endpoint composes for ``--enable-auto-tool-choice
    --tool-call-parser TOOL --reasoning-parser REASONING`` (and checks at start-up)."""
    cls = ParserManager.get_parser(
        tool_parser_name=tool,
        reasoning_parser_name=reasoning,
        enable_auto_tools=True,
        model_name="m",
        tokenizer=tokenizer,
    )
    assert cls is not None
    return cls


def _make(cls: type[Parser], tokenizer: Any, request: ChatCompletionRequest) -> Parser:
    kwargs = request.build_chat_params(None, "auto").chat_template_kwargs
    return cls(tokenizer, request.tools, chat_template_kwargs=kwargs, model_config=None)


@dataclass
class Reply:
    """An assistant message as the client receives it (``None`` and ``""`` alike)."""

    content: str = ""
    reasoning: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)

    def as_oracle(self) -> dict[str, Any]:
        """The parse corpus' message shape (compare.py)."""
        return {
            "content": self.content,
            "reasoning_content": self.reasoning,
            "tool_calls": [{"name": n, "arguments": a} for n, a in self.calls],
        }


def finished(cls: type[Parser], tokenizer: Any, request: ChatCompletionRequest, text: str) -> Reply:
    """The non-streaming response's message for the model output ``text``."""
    parser = _make(cls, tokenizer, request)
    reasoning, content, calls = parser.parse(text, request, enable_auto_tools=True)
    fields = assemble_chat_message_fields(
        request, reasoning, content, calls, enable_auto_tools=True, parser_cls=cls
    )
    return Reply(
        fields.content or "",
        fields.reasoning or "",
        [(c.function.name, c.function.arguments) for c in fields.tool_calls],
    )


def streamed(
    cls: type[Parser],
    tokenizer: Any,
    request: ChatCompletionRequest,
    pieces: Sequence[str],
    ids: Sequence[int] | None = None,
    times: list[float] | None = None,
) -> tuple[Reply, int]:
    """The streaming response for the model output arriving in ``pieces`` (the last one
    with the engine's finish reason; ``ids``: each piece's token id), added up as a client
    adds the chunks; and how many chunk deltas vLLM sent. ``times`` gets each step's
    duration (``time.perf_counter`` seconds) appended."""
    parser = _make(cls, tokenizer, request)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=cls)
    reply = Reply()
    calls: dict[int, list[str]] = {}
    sent = 0
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        token = ([ids[i]] if ids is not None else [0]) if piece else []
        start = time.perf_counter()
        step = processor.step(piece, token, "stop" if last else None, [1])
        if times is not None:
            times.append(time.perf_counter() - start)
        delta = step.delta
        if delta is None:
            continue
        sent += 1
        reply.content += delta.content or ""
        reply.reasoning += delta.reasoning or ""
        for call in delta.tool_calls:
            slot = calls.setdefault(call.index, ["", ""])
            if call.function is not None:
                slot[0] += call.function.name or ""
                slot[1] += call.function.arguments or ""
    reply.calls = [(name, args) for _, (name, args) in sorted(calls.items())]
    return reply, sent


def random_cuts(text: str, rng: random.Random, mean: int = 4) -> list[str]:
    """``text`` cut at random places (pieces of 1 to 2*mean-1 characters), as detokenized
    engine steps arrive; one empty piece for an empty text."""
    if not text:
        return [""]
    pieces = []
    at = 0
    while at < len(text):
        step = rng.randint(1, 2 * mean - 1)
        pieces.append(text[at : at + step])
        at += step
    return pieces


def every_final_output(cases: Iterable[dict[str, Any]]) -> Iterable[tuple[dict, int, dict]]:
    """(case, index, output) of each finished (not partial) output of the cases."""
    for case in cases:
        if case.get("llama_cpp") is None:
            continue
        for i, output in enumerate(case["outputs"]):
            if not output["is_partial"]:
                yield case, i, output
