"""The engine behind the server: one small async interface, whatever does the generating.

An engine takes a `Generation` (the prompt, the sampling parameters, the stop strings and an
optional grammar) and gives `Piece`s: text as it is generated, the last piece carrying the
finish reason (``stop`` or ``length``) and the token usage. `RemoteEngine` (a server speaking
OpenAI's ``/v1/completions``) and `LlamaEngine` (llama.cpp in this process) are the two kept
here; another protocol or another in-process engine is one more class with ``generate``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..grammar.constraint import Grammar

__all__ = [
    "Engine",
    "EngineError",
    "EngineReplyError",
    "EngineRequestError",
    "EngineTimeout",
    "Generation",
    "Piece",
    "Usage",
]


@dataclass(frozen=True)
class Usage:
    """Tokens the engine read (``prompt_tokens``) and wrote (``completion_tokens``)."""

    prompt_tokens: int
    completion_tokens: int

    def to_openai(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


@dataclass(frozen=True)
class Generation:
    """What to generate: ``prompt`` continued until a ``stop`` string (not included in the
    text), the end of generation, or ``max_tokens``; under ``grammar`` when one is given."""

    prompt: str
    stop: tuple[str, ...] = ()
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    grammar: Grammar | None = None


@dataclass(frozen=True)
class Piece:
    """Text the engine generated; the last piece of a generation has a ``finish_reason``
    (``"stop"`` or ``"length"``) and, when the engine counts them, the ``usage``."""

    text: str
    finish_reason: str | None = None
    usage: Usage | None = None


class EngineError(Exception):
    """The engine failed or could not be reached (the server answers 502).

    ``status``, ``code`` and ``param`` are the HTTP status, OpenAI error code and request
    field the server answers with (or puts in the error event of a stream that has
    begun)."""

    status = 502
    code: str | None = None
    param: str | None = None


class EngineTimeout(EngineError):
    """The engine did not answer in time (the server answers 504)."""

    status = 504


class EngineReplyError(EngineError):
    """The engine answered something its protocol does not allow: an event that is not JSON
    or not in the protocol's shape, a line or body over the bound, a stream cut before its
    finish reason (the server answers 502, code ``bad_engine_reply``)."""

    code = "bad_engine_reply"


class EngineRequestError(EngineError):
    """The engine refuses the request itself, before generating: a prompt longer than its
    context, a grammar it cannot parse (the server answers 400, with OpenAI's ``code`` and
    ``param`` when there is one)."""

    status = 400

    def __init__(self, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


class Engine(Protocol):
    """An engine the server can drive.

    ``takes_grammar``: whether ``generate`` enforces a `Generation`'s grammar (a request
    whose tool_choice or response_format needs one is refused by the server otherwise).
    ``generate`` yields the pieces of one generation; closing the iterator early (a client
    that went away) stops the generation.
    """

    takes_grammar: bool

    def generate(self, request: Generation) -> AsyncIterator[Piece]: ...

    async def aclose(self) -> None: ...
