"""ReplyStream: text in, deltas out (sans I/O). A finished parse is ``feed(whole)`` + ``finish()``."""

from __future__ import annotations

from ..errors import ReplyError
from .description import ReplyFormat
from .engine import Fed, ReplyEngine
from .mapper import MappedCall
from .message import (
    AssistantMessage,
    Delta,
    ToolCall,
    ToolCallDelta,
    content_delta,
    reasoning_delta,
)

__all__ = ["ReplyStream", "parse_reply"]

_MAPPER_SPACE = frozenset(" \n\r\t")


def _blank(text: str) -> bool:
    # llama.cpp clears a reasoning made only of these four characters
    return all(c in _MAPPER_SPACE for c in text)


class ReplyStream:
    """Feed a reply in any chunks; every delta is final (nothing is ever taken back).

    A tool call is announced once it is known to be kept: when its closing marker arrives, or
    when the reply ends inside it. Text is held back only while it may still start a marker
    (and a thought while it is only whitespace, which llama.cpp would clear).
    """

    def __init__(
        self, fmt: ReplyFormat, generation_prompt: str = "", id_prefix: str = "call_"
    ) -> None:
        self.format = fmt
        self.id_prefix = id_prefix
        self._engine = ReplyEngine(fmt, generation_prompt)
        self._reasoning_taken = 0
        self._reasoning_held: list[str] = []
        self._reasoning_started = False
        self._content_taken = 0
        self._calls_sent = 0
        self._closed = False
        self._message: AssistantMessage | None = None

    def feed(self, chunk: str) -> list[Delta]:
        """Add text of the reply; returns the deltas it makes certain."""
        if self._closed:
            raise ReplyError("the stream has already been finished")
        engine = self._engine
        fed = engine.feed(chunk)
        # the engine's fast path made one new piece and nothing else: its delta is that piece
        # (what _deltas would give: every earlier piece was taken, no call was committed)
        if fed is Fed.CONTENT:
            pieces = engine.content_pieces
            if self._content_taken == len(pieces) - 1:
                self._content_taken += 1
                return [content_delta(pieces[-1])]
        elif fed is Fed.REASONING:
            pieces = engine.reasoning_pieces
            if self._reasoning_started and self._reasoning_taken == len(pieces) - 1:
                self._reasoning_taken += 1
                return [reasoning_delta(pieces[-1])]
        elif fed is Fed.NOTHING:
            if self._content_taken == len(engine.content_pieces) and self._reasoning_taken == len(
                engine.reasoning_pieces
            ):
                return []
        return self._deltas(engine.committed_calls)

    def flush(self) -> list[Delta]:
        """End the reply; returns the last deltas (a call the reply ended inside, ...)."""
        if self._closed:
            return []
        self._closed = True
        self._engine.finish()
        if self._engine.failed:
            self._message = None
            return []
        deltas = self._deltas(self._engine.calls(), final=True)
        self._message = self._build()
        return deltas

    def finish(self, partial: bool = False) -> AssistantMessage:
        """The finished message. ``partial=True`` reads the text as a prefix of a longer reply
        (llama.cpp's is_partial): a parse failure then gives an empty message instead of an error."""
        self.flush()
        failure = self._engine.failure
        if self._engine.failed and failure is not None:
            if partial and failure.position > 0:
                return AssistantMessage(dropped=tuple(self._engine.dropped))
            raise ReplyError(
                f"The model produced output that does not match the expected "
                f"{self.format.handler} format: {failure.reason} "
                f"(at reply offset {failure.position - self._engine.prompt_length})"
            )
        assert self._message is not None
        return self._message

    # ------------------------------------------------------------------ internals

    def _call_id(self, index: int, call: MappedCall) -> str:
        return call.id or f"{self.id_prefix}{index}"

    def _deltas(self, calls: list[MappedCall], final: bool = False) -> list[Delta]:
        engine = self._engine
        out: list[Delta] = []
        pieces = engine.reasoning_pieces
        if self._reasoning_taken < len(pieces):
            self._reasoning_held.extend(pieces[self._reasoning_taken :])
            self._reasoning_taken = len(pieces)
        if self._reasoning_held:
            text = "".join(self._reasoning_held)
            if self._reasoning_started or not _blank(text):
                self._reasoning_started = True
                self._reasoning_held.clear()
                out.append(Delta(reasoning_content=text))
            elif final:
                self._reasoning_held.clear()
        pieces = engine.content_pieces
        if self._content_taken < len(pieces):
            text = "".join(pieces[self._content_taken :])
            self._content_taken = len(pieces)
            if text:
                out.append(Delta(content=text))
        while self._calls_sent < len(calls):
            i = self._calls_sent
            call = calls[i]
            out.append(
                Delta(
                    tool_call=ToolCallDelta(
                        index=i, id=self._call_id(i, call), name=call.name, arguments=call.arguments
                    )
                )
            )
            self._calls_sent += 1
        return out

    def _build(self) -> AssistantMessage:
        engine = self._engine
        reasoning = "".join(engine.reasoning_pieces)
        if _blank(reasoning):
            reasoning = ""
        calls = engine.calls()
        return AssistantMessage(
            content="".join(engine.content_pieces),
            reasoning_content=reasoning,
            tool_calls=tuple(
                ToolCall(name=c.name, arguments=c.arguments, id=self._call_id(i, c))
                for i, c in enumerate(calls)
            ),
            dropped=tuple(engine.dropped),
        )


def parse_reply(
    fmt: ReplyFormat,
    generation_prompt: str,
    text: str,
    partial: bool = False,
    id_prefix: str = "call_",
) -> AssistantMessage:
    """The finished parse: the same code path as a stream fed the whole text at once."""
    stream = ReplyStream(fmt, generation_prompt, id_prefix)
    stream.feed(text)
    return stream.finish(partial=partial)
