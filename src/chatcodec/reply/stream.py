"""ReplyStream: text in, deltas out (sans I/O). A finished parse is ``feed(whole)`` + ``finish()``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from ..errors import ReplyError, RequestError, StreamedCallError
from .description import ReplyFormat
from .engine import FED_ARGUMENTS, FED_CONTENT, FED_NOTHING, FED_REASONING, ReplyEngine
from .mapper import MappedCall
from .message import (
    AssistantMessage,
    Delta,
    ToolCall,
    ToolCallDelta,
    arguments_delta,
    content_delta,
    reasoning_delta,
)

__all__ = ["ReplyStream", "StreamEnd", "CallIdPrefix", "DEFAULT_CALL_IDS", "parse_reply"]

_MAPPER_SPACE = frozenset(" \n\r\t")
_ROLE = "assistant"


def _blank(text: str) -> bool:
    # llama.cpp clears a reasoning made only of these four characters
    return all(c in _MAPPER_SPACE for c in text)


class CallIdPrefix:
    """The default tool-call ids: ``prefix`` followed by the call's index (``call_0``, ...)."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str = "call_") -> None:
        self.prefix = prefix

    def __call__(self, index: int) -> str:
        return f"{self.prefix}{index}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallIdPrefix) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)

    def __repr__(self) -> str:
        return f"CallIdPrefix({self.prefix!r})"


DEFAULT_CALL_IDS = CallIdPrefix()


class StreamEnd(NamedTuple):
    """What ending a stream gives: the last ``deltas`` (a call the reply ended inside, text
    held back while it might have started a marker, ...) and the finished ``message``."""

    deltas: list[Delta]
    message: AssistantMessage


class ReplyStream:
    """Feed a reply in any chunks; every delta is final (nothing is ever taken back).

    A tool call is announced (index, id, name, its arguments so far) once its name is
    complete and it is kept (an offered tool, within the parallel limit, not in a thought),
    then its arguments follow in fragments as llama.cpp's partial parses grow them; a call
    that then does not parse as sent fails the stream at ``finish`` (``StreamedCallError``).
    Text is held back only while it may still start a marker
    (and a thought while it is only whitespace, which llama.cpp would clear). The first delta
    carries ``role="assistant"``.

    ``call_id(index)`` names a call the model gave no id of its own (index 0, 1, ... in the
    reply); it is asked once per such call and stream.
    """

    def __init__(
        self,
        fmt: ReplyFormat,
        generation_prompt: str = "",
        call_id: Callable[[int], str] = DEFAULT_CALL_IDS,
    ) -> None:
        self.format = fmt
        self.call_id = call_id
        self._engine = ReplyEngine(fmt, generation_prompt)
        self._reasoning_taken = 0
        self._reasoning_held: list[str] = []
        self._reasoning_started = False
        self._content_taken = 0
        # per call announced: (name, arguments sent so far); the calls before _done are
        # final and wholly sent (never looked at again)
        self._sent: list[tuple[str, str]] = []
        self._done = 0
        # the call whose arguments grow as written (its sent arguments are the partial
        # parse's), and what they grew by since (joined into _sent at the next parse)
        self._growing: int | None = None
        self._grown: list[str] = []
        self._contradicted = ""  # why an announced call's final form does not extend it
        self._ids: dict[int, str] = {}
        self._role_sent = False
        self._closed = False

    def feed(self, chunk: str) -> list[Delta]:
        """Add text of the reply; returns the deltas it makes certain."""
        if self._closed:
            raise ReplyError("the stream has already been finished")
        engine = self._engine
        fed = engine.feed(chunk)
        # the engine's fast path made one new piece and nothing else: its delta is that piece
        # (what _deltas would give: every earlier piece was taken, no call was committed, and
        # the role went out with an earlier delta)
        if fed is FED_CONTENT:
            pieces = engine.content_pieces
            if self._content_taken == len(pieces) - 1 and self._role_sent:
                self._content_taken += 1
                return [content_delta(pieces[-1])]
        elif fed is FED_REASONING:
            pieces = engine.reasoning_pieces
            if self._reasoning_started and self._reasoning_taken == len(pieces) - 1:
                self._reasoning_taken += 1
                return [reasoning_delta(pieces[-1])]
        elif fed is FED_ARGUMENTS:
            index = self._growing
            if index is None:
                return []
            fragment = engine.out.arguments_fragment
            self._grown.append(fragment)
            return [arguments_delta(index, fragment)]
        elif fed is FED_NOTHING:
            if self._content_taken == len(engine.content_pieces) and self._reasoning_taken == len(
                engine.reasoning_pieces
            ):
                return []
        out = engine.out
        return self._deltas(out.committed, provisional=out.provisional)

    def finish(self, partial: bool = False) -> StreamEnd:
        """End the reply: the last deltas and the finished message, together, so that no
        delta can be left behind (``deltas, message = stream.finish()``).

        ``partial=True`` reads the text as a prefix of a longer reply (llama.cpp's
        is_partial): a parse failure then gives an empty message instead of an error. A stream
        ends once; a second ``finish`` (or a ``feed`` after it) is a ReplyError.
        """
        if self._closed:
            raise ReplyError("the stream has already been finished")
        self._closed = True
        engine = self._engine
        engine.finish()
        failure = engine.failure
        if engine.failed and self.format.policy == "guaranteed":
            engine.salvage()  # what was read stays, the rest is content or dropped
        elif engine.failed and failure is not None:
            if partial and failure.position > 0:
                return StreamEnd(
                    self._with_role([]), AssistantMessage(dropped=tuple(engine.dropped))
                )
            raise ReplyError(
                f"The model produced output that does not match the expected "
                f"{self.format.handler} format: {failure.reason} "
                f"(at reply offset {failure.position - engine.prompt_length})"
            )
        calls = engine.calls()
        deltas = self._deltas(calls, final=True)
        if len(calls) < len(self._sent) and not self._contradicted:
            self._contradicted = f"tool call {len(calls)} was announced but did not parse"
        if self._contradicted:
            raise StreamedCallError(
                f"The model produced output that does not match the expected "
                f"{self.format.handler} format after its tool call was streamed: "
                f"{self._contradicted}"
            )
        return StreamEnd(self._with_role(deltas), self._build())

    @property
    def whole_calls(self) -> int:
        """How many of the calls read so far were read whole: after ``finish``, the message's
        calls past these were cut short by the end of the reply (their arguments may not be
        complete JSON)."""
        return len(self._engine.committed_calls)

    # ------------------------------------------------------------------ internals

    def _call_id(self, index: int, call: MappedCall) -> str:
        made = self._ids.get(index)
        if made is not None:  # the id the call was announced with stays (llama.cpp's too)
            return made
        if call.id:  # the model wrote its own id: kept
            self._ids[index] = call.id
            return call.id
        if made is None:  # asked once per call: the delta and the message share the id
            made = self._ids[index] = self.call_id(index)
            if not isinstance(made, str) or not made:
                raise RequestError(f"tool_call_id gave {made!r} for call {index}, not an id string")
        return made

    def _with_role(self, deltas: list[Delta]) -> list[Delta]:
        """``deltas`` with the role on the first delta of the stream (a delta of its own when
        the stream ends having shown nothing)."""
        if self._role_sent:
            return deltas
        self._role_sent = True
        if not deltas:
            return [Delta(role=_ROLE)]
        return [replace(deltas[0], role=_ROLE), *deltas[1:]]

    def _deltas(
        self,
        calls: list[MappedCall],
        final: bool = False,
        provisional: list[MappedCall] | None = None,
    ) -> list[Delta]:
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
        if len(calls) > self._done or provisional:
            self._call_deltas(calls, provisional or [], out)
        if out and not self._role_sent:
            return self._with_role(out)
        return out

    def _call_deltas(
        self, calls: list[MappedCall], provisional: list[MappedCall], out: list[Delta]
    ) -> None:
        """Announce the calls not announced yet and send what each call's arguments grew by.

        ``calls`` are final (committed, or all of them at the end), ``provisional`` those a
        partial parse shows in progress after them. A call is announced with its arguments
        so far; later its arguments are sent only as they extend what was sent. Where a
        partial parse shows them otherwise (llama.cpp's diff would throw), nothing more is
        sent for the call until a later parse extends what was sent again; a final call that
        does not, fails the stream at the end.
        """
        sent = self._sent
        growing = self._growing
        if self._grown and growing is not None:
            name, args = sent[growing]
            sent[growing] = (name, args + "".join(self._grown))
            self._grown.clear()
        self._growing = None
        n = len(calls)
        for i in range(self._done, n + len(provisional)):
            call = calls[i] if i < n else provisional[i - n]
            if i >= len(sent):
                out.append(
                    Delta(
                        tool_call=ToolCallDelta(
                            index=i,
                            id=self._call_id(i, call),
                            name=call.name,
                            arguments=call.arguments,
                        )
                    )
                )
                sent.append((call.name, call.arguments))
            else:
                name, args = sent[i]
                grown = call.arguments
                if grown is args:
                    pass  # (the same parse: nothing new)
                elif call.name == name and grown.startswith(args):
                    if len(grown) > len(args):
                        piece = ToolCallDelta(index=i, arguments=grown[len(args) :])
                        out.append(Delta(tool_call=piece))
                    sent[i] = (name, grown)
                elif i < n and not self._contradicted:
                    self._contradicted = (
                        f"tool call {i} ({name}) became {call.name} with arguments "
                        f"{grown!r}, not an extension of the {args!r} sent"
                    )
            if i < n and i == self._done:
                self._done += 1
        last = n + len(provisional) - 1
        if provisional and last < len(sent) and sent[last][1] is provisional[-1].arguments:
            self._growing = last  # sent as the parse shows them: they may grow as written

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
    call_id: Callable[[int], str] = DEFAULT_CALL_IDS,
) -> AssistantMessage:
    """The finished parse: the same code path as a stream fed the whole text at once."""
    stream = ReplyStream(fmt, generation_prompt, call_id)
    stream.feed(text)
    return stream.finish(partial=partial).message
