"""The decoder's promises, checked on any reply (the fuzz tests' oracle).

``check_reply(turn, text, chunkings)`` parses ``text`` and streams it in each chunking, and
checks what docs/decoding.md promises of every reply, well formed or not:

- only ``ReplyError`` escapes, the same one from the parse and from every stream;
- the stream ends with the parse's message; every delta is final: the role comes with the
  first delta only, a call is announced once (index, id, name) and then only extended,
  content, reasoning and each call's arguments only extend, and the fold of the deltas is
  the message; what was sent after any piece is a prefix of the message the text so far
  gives if the reply ends there, also when the whole reply fails later. The documented
  retractions: a reply that fails after deltas were sent (the deltas stand and the stream
  fails), a call announced while the model wrote it that did not parse in the end, or into
  arguments that do not extend those sent (the stream fails with ``StreamedCallError``,
  the parse reads the reply; only where the parse's message really contradicts what was
  sent), and a ``partial`` finish of a failed reply, whose message is empty (llama.cpp's
  is_partial rule);
- every ``dropped`` entry names the reply's own text at its offset, and no text is lost that
  ``dropped`` does not name: each sentinel word of the reply (``zq<n>x``, written into the
  generated text by the fuzz tests) that lies outside the dropped spans is found in the
  content, the reasoning or a tool call (name, arguments or the model's own id).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chatcodec import ReplyError, StreamedCallError
from chatcodec.reply import AssistantMessage, Delta, Turn, fold
from chatcodec.reply.description import Calls, Content, Thought

SENTINEL = re.compile(r"zq\d+x")


def sentinel(n: int) -> str:
    """The ``n``-th sentinel word: letters and digits no marker of any family contains."""
    return f"zq{n}x"


def fuzz_cases(cases: Sequence[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` corpus cases of one template to fuzz from, spread over its request
    setups (tool_choice, parallel calls, reasoning format): three in four whose finished
    replies hold tool calls (the calls are what a reply format mostly reads), then others."""

    def has_calls(case: dict[str, Any]) -> bool:
        return any(
            (o.get("expected") or {}).get("tool_calls")
            for o in case["outputs"]
            if not o["is_partial"]
        )

    def setup(case: dict[str, Any]) -> str:
        parts = case["id"].split("__")
        return parts[1] if len(parts) > 2 else ""

    chosen: list[dict[str, Any]] = []
    for group, until in ((True, limit - limit // 4), (False, limit)):
        queues: dict[str, list[dict[str, Any]]] = {}
        for case in cases:
            if has_calls(case) is group:
                queues.setdefault(setup(case), []).append(case)
        while any(queues.values()) and len(chosen) < until:
            for queue in queues.values():  # one case of each setup in turn
                if queue and len(chosen) < until:
                    chosen.append(queue.pop(0))
    return chosen


def reply_markers(turn: Turn) -> list[str]:
    """The markers the turn's reply format reads (its thought, content stops and calls)."""
    fmt = turn.format
    found: set[str] = set(turn.stop)
    thought = fmt.find(Thought)
    if thought is not None:
        found.update([thought.block.start, *thought.block.stops])
    content = fmt.find(Content)
    if content is not None:
        found.update([*(content.stops or ()), content.open, content.close])
    calls = fmt.find(Calls)
    if calls is not None:
        section = calls.section
        found.update([*section.openers, section.name_marker, section.name_marker_end])
        if isinstance(section.commit, str):
            found.add(section.commit)
    if fmt.flow is not None:
        found.update(fmt.flow.openers)
    return sorted(m for m in found if m)


@dataclass
class Streamed:
    """One stream of a reply: the deltas after each piece (the finish's last), and the end."""

    steps: list[list[Delta]] = field(default_factory=list)
    message: AssistantMessage | None = None
    error: str = ""
    streamed_call: bool = False  # the error is StreamedCallError

    @property
    def deltas(self) -> list[Delta]:
        return [d for step in self.steps for d in step]


def stream(turn: Turn, pieces: Sequence[str], partial: bool = False) -> Streamed:
    out = Streamed()
    s = turn.stream()
    try:
        for piece in pieces:
            out.steps.append(s.feed(piece))
        end = s.finish(partial=partial)
    except ReplyError as exc:
        out.error = f"ReplyError: {exc}"
        out.streamed_call = isinstance(exc, StreamedCallError)
        return out
    out.steps.append(end.deltas)
    out.message = end.message
    return out


def parse(turn: Turn, text: str, partial: bool = False) -> AssistantMessage | str:
    try:
        return turn.parse(text, partial=partial)
    except ReplyError as exc:
        return f"ReplyError: {exc}"


def check_deltas_are_final(
    deltas: list[Delta], message: AssistantMessage | None, text: str, ended: bool = True
) -> None:
    """Every delta is final: announced once, only extended; with ``message`` (the stream
    ended well), everything sent is a prefix of the message's fields, and folds to it when
    these are all the stream's deltas (``ended``)."""
    calls: dict[int, list[str]] = {}
    content = reasoning = ""
    for n, delta in enumerate(deltas):
        assert bool(delta.role) == (n == 0), f"role on delta {n} of {text!r}"
        content += delta.content
        reasoning += delta.reasoning_content
        call = delta.tool_call
        if call is not None:
            if call.index in calls:
                assert (call.id, call.name) == ("", ""), f"call {call.index} re-announced: {text!r}"
                calls[call.index][2] += call.arguments
            else:
                assert call.index == len(calls), f"call {call.index} out of order: {text!r}"
                assert call.name and call.id, f"call {call.index} without name or id: {text!r}"
                calls[call.index] = [call.id, call.name, call.arguments]
        if message is None:
            continue
        assert message.content.startswith(content), ("content retracted", text)
        assert message.reasoning_content.startswith(reasoning), ("reasoning retracted", text)
        for index, (call_id, name, arguments) in calls.items():
            assert index < len(message.tool_calls), ("call retracted", index, text)
            final = message.tool_calls[index]
            assert (final.id, final.name) == (call_id, name), ("call changed", index, text)
            assert final.arguments.startswith(arguments), ("arguments retracted", index, text)
    if message is not None and ended:
        # a client always sees the role, even from a stream with nothing to show
        assert deltas and deltas[0].role == "assistant", ("no role", text)
        folded = fold(deltas)
        assert (folded.content, folded.reasoning_content, folded.tool_calls) == (
            message.content,
            message.reasoning_content,
            message.tool_calls,
        ), ("the deltas do not fold to the message", text)


def kept_text(message: AssistantMessage) -> str:
    """Everything of the reply the message holds, one field after another."""
    parts = [message.content, message.reasoning_content]
    for call in message.tool_calls:
        parts += [call.name, call.arguments, call.id]
    return "\n".join(parts)


def check_nothing_lost(message: AssistantMessage, text: str) -> None:
    """``dropped`` names the reply's own text, and a sentinel outside it is kept somewhere."""
    spans = sorted((d.offset, d.offset + len(d.text)) for d in message.dropped)
    for d in message.dropped:
        assert 0 <= d.offset and text[d.offset : d.offset + len(d.text)] == d.text, (d, text)
    outside, at = [], 0
    for start, end in spans:
        assert start >= at, ("dropped spans overlap", message.dropped, text)
        outside.append(text[at:start])
        at = end
    outside.append(text[at:])
    # (a sentinel a dropped span's edge cuts is partly named there: it is counted on no side)
    read = Counter(w for part in outside for w in SENTINEL.findall(part))
    kept = Counter(SENTINEL.findall(kept_text(message)))
    lost = read - kept
    assert not lost, (
        f"text lost without a `dropped` entry: {sorted(lost)} of {text!r} -> {message.to_dict()}"
    )


def check_sent_before_the_end(turn: Turn, pieces: Sequence[str], got: Streamed) -> None:
    """A delta is final for what it says, even when the reply fails later: what was sent
    after each piece is a prefix of the message the text so far gives if it ends there
    (when it parses)."""
    sent: list[Delta] = []
    text = ""
    for piece, step in zip(pieces, got.steps, strict=False):  # (no step after a failed feed)
        text += piece
        sent += step
        ended_here = parse(turn, text)
        if isinstance(ended_here, AssistantMessage):
            if got.streamed_call and contradicts(sent, ended_here):
                # a call announced while it was written proved malformed here: the stream
                # must fail (StreamedCallError), having sent nothing that contradicts more
                return
            check_deltas_are_final(sent, ended_here, text, ended=False)


def contradicts(deltas: list[Delta], message: AssistantMessage) -> bool:
    """Whether the calls ``deltas`` announced are not all in ``message`` as sent (a call that
    vanished, or arguments that do not extend those sent): a stream must then fail."""
    sent = fold(deltas).tool_calls
    if len(sent) > len(message.tool_calls):
        return True
    return any(
        final.name != call.name or not final.arguments.startswith(call.arguments)
        for call, final in zip(sent, message.tool_calls, strict=False)
    )


def check_streamed_call_failure(got: Streamed, expected: AssistantMessage | str) -> bool:
    """Whether ``got`` failed with the documented StreamedCallError; it must fail so only
    where the reply parses and its message contradicts a call the deltas announced."""
    if not got.streamed_call:
        return False
    assert isinstance(expected, AssistantMessage), (got.error, expected)
    assert contradicts(got.deltas, expected), (got.error, expected)
    check_deltas_are_final(got.deltas, None, "")
    return True


def check_reply(turn: Turn, text: str, chunkings: Sequence[Sequence[str]]) -> None:
    """All the promises above, for ``text`` streamed in each of ``chunkings``."""
    expected = parse(turn, text)
    for pieces in chunkings:
        assert "".join(pieces) == text
        got = stream(turn, pieces)
        if check_streamed_call_failure(got, expected):
            if 1 < len(pieces) <= 16:
                check_sent_before_the_end(turn, pieces, got)
            continue
        assert (got.message or got.error) == expected, (len(pieces), text)
        check_deltas_are_final(got.deltas, got.message, text)
        if 1 < len(pieces) <= 16:  # a few cuts: each prefix costs a parse
            check_sent_before_the_end(turn, pieces, got)
    if isinstance(expected, AssistantMessage):
        check_nothing_lost(expected, text)
    # partial: the same parse, or (a failure past the start) the documented empty message
    pieces = chunkings[0] if chunkings else [text]
    got = stream(turn, pieces, partial=True)
    if check_streamed_call_failure(got, parse(turn, text, partial=True)):
        return
    assert (got.message or got.error) == parse(turn, text, partial=True), text
    if isinstance(expected, AssistantMessage):
        assert got.message == expected, text
    elif got.message is not None:
        assert (got.message.content, got.message.reasoning_content) == ("", ""), text
        assert not got.message.tool_calls, text
        check_deltas_are_final(got.deltas, None, text)
