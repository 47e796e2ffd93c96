"""The one incremental engine: runs a ReplyFormat over ``generation_prompt + reply`` as it arrives.

Text is consumed left to right and never re-read, except the text of the one tool call in
progress, which is parsed (by the small PEG engine) only when it may have completed: when its
closing marker arrives, when its text has doubled since the last try, or at the end. Every
result equals llama.cpp's parse of the same whole text (lenient: a cut-short structure is
NEED_MORE, never a failure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .description import (
    CallSection,
    Marker,
    NotMarker,
    ReasoningBlock,
    ReplyFormat,
    Step,
    Text,
    Whitespace,
)
from .flow import FlowRunner
from .mapper import CallMapper, MappedCall
from .message import Dropped
from .peg import FAIL, NEED_MORE, SUCCESS, Until, is_c_space

__all__ = [
    "ReplyEngine",
    "EngineFailure",
    "FED_SOME",
    "FED_CONTENT",
    "FED_REASONING",
    "FED_NOTHING",
]

# what ReplyEngine.feed did with a chunk (FED_SOME: anything, the caller looks at the results)
FED_SOME, FED_CONTENT, FED_REASONING, FED_NOTHING = range(4)

_WAIT, _NEXT, _STOP, _FAIL = range(4)
_GOTO = 4  # the step index was set directly (a thought that turns into tool calls and back)
_PREFIX, _REASONING, _SPACE, _CONTENT, _CALLS, _END = range(6)
_FLOW = 6  # a reply made of several messages (ReplyFormat.flow, run by flow.FlowRunner)


@dataclass(frozen=True)
class EngineFailure:
    """Where llama.cpp's parse would fail (it throws on a finished reply)."""

    position: int
    reason: str


class ReplyEngine:
    def __init__(self, fmt: ReplyFormat, generation_prompt: str = "") -> None:
        self.fmt = fmt
        self.prompt_length = len(generation_prompt)
        steps: list[int | Step] = [_PREFIX]
        if fmt.space_after_prefix:
            steps.append(_SPACE)
        if fmt.reasoning is not None:
            steps.append(_REASONING)
        if fmt.space_before_content:
            steps.append(_SPACE)
        if fmt.calls is not None and fmt.calls_or_content:
            steps.append(_CALLS)  # tried first where the content would begin
        steps.extend(fmt.before_content)
        if fmt.content_enabled:
            steps.append(_CONTENT)
        steps.extend(fmt.after_content)
        if fmt.calls is not None and not fmt.calls_or_content:
            if fmt.space_before_calls:
                steps.append(_SPACE)
            steps.append(_CALLS)
        # the steps run only when a tool call was read
        self._after_calls = frozenset(range(len(steps), len(steps) + len(fmt.after_calls)))
        steps.extend(fmt.after_calls)
        steps.extend(fmt.tail)
        if fmt.end_anchor:
            steps.append(_END)
        self._steps = steps
        if fmt.flow is not None:
            self._steps = [_PREFIX, _FLOW]
        self._text_until = {id(s): Until(*s.stops) for s in steps if isinstance(s, Text)}
        self._step = 0
        self._sub = 0
        self._buf = ""
        self._base = 0
        self._pos = 0
        self._pending: list[str] = []
        self._pending_len = 0
        self._eof = False
        self._reasoning_until = Until(*fmt.reasoning.stops) if fmt.reasoning else None
        self._content_until = Until(*fmt.content_stops) if fmt.content_stops is not None else None
        # Set by the step that returned _WAIT when all it waits for is more plain text: the text
        # goes to ``_plain_out`` up to the first of ``_plain_until``'s stops (None: no stop). A
        # chunk in which no stop can begin is then taken by `feed` directly (the fast path).
        self._plain_out: list[str] | None = None
        self._plain_until: Until | None = None
        # Set by the step that returned _WAIT for a call in progress: whether the text that
        # arrived since may change the call's outcome. Until it does, `feed` only queues text.
        self._ready: Callable[[], bool] | None = None
        # where a thought's text goes (a block kept inline is content, markers included)
        inline = fmt.reasoning is not None and fmt.reasoning.as_content
        self._thought_pieces: list[str] = []
        self._skip_content = False
        # the brace balance of the call in progress (CallSection.commit_balance)
        self._depth = 0
        self._quote = ""
        self._escaped = False
        # the call in progress
        self._calls_done = 0
        self._tried_len = -1
        self._commit_window = ""
        self._commit_hit = False
        self._limit_reached = False
        self._segment_failed = False
        self.mapper = fmt.calls.make_mapper() if fmt.calls is not None else CallMapper()
        self._flow: FlowRunner | None = None
        if fmt.flow is not None:
            self.mapper = fmt.flow.make_mapper()
            self._flow = FlowRunner(self, fmt.flow)
        self._thought_call = False
        self.committed_calls: list[MappedCall] = []
        self.reasoning_pieces: list[str] = []
        self.content_pieces: list[str] = []
        if inline:
            self._thought_pieces = self.content_pieces
        else:
            self._thought_pieces = self.reasoning_pieces
        if fmt.reasoning is not None and fmt.reasoning.body_target != "reasoning":
            # the body inline (markers consumed), or read and dropped
            inline_body = fmt.reasoning.body_target == "content"
            self._thought_pieces = self.content_pieces if inline_body else []
        self.dropped: list[Dropped] = []
        self.failure: EngineFailure | None = None
        self._state = "running"  # running | tail | stopped | failed
        self._tail: list[str] = []
        self._tail_start = 0
        self._tail_reason = ""
        self.feed(generation_prompt)

    # ------------------------------------------------------------------ input

    def feed(self, chunk: str) -> int:
        """Add text; returns FED_CONTENT / FED_REASONING when all of it (with any held text)
        became one new content / reasoning piece and nothing else changed, FED_NOTHING when it
        changed nothing visible, FED_SOME otherwise."""
        if self._eof:
            raise ValueError("the reply has already been finished")
        if not chunk:
            if self._state == "running":
                self._run()
            return FED_SOME
        if self._state == "tail":
            self._tail.append(chunk)
            return FED_SOME
        if self._state != "running":
            return FED_SOME
        out = self._plain_out
        if out is not None and not self._pending:
            # fast path: the step waits for plain text. It would commit the held text (a
            # possible marker start) and the chunk up to the first stop, or up to a stop's
            # beginning cut by the end, and, without a whole stop, wait again holding the rest:
            # do that here, and run the step only when a whole stop was found.
            buf = self._buf
            text = buf[self._pos :] + chunk if self._pos < len(buf) else chunk
            n = len(text)
            until = self._plain_until
            if until is None or until.firsts.isdisjoint(text):
                stop, complete = n, False
            else:
                stop, complete = until.find(text, 0)
            if stop:
                out.append(text if stop == n else text[:stop])
            self._base += len(buf) + len(chunk) - n + stop
            self._buf = text[stop:] if stop < n else ""
            self._pos = 0
            if complete:
                self._run()
                return FED_SOME
            if not stop:
                return FED_NOTHING
            if out is self.content_pieces:
                return FED_CONTENT
            return FED_REASONING if out is self.reasoning_pieces else FED_NOTHING
        kind = self._steps[self._step] if self._step < len(self._steps) else -1
        calls = self.fmt.calls
        if kind == _CALLS and calls is not None and calls.commit_balance is not None:
            self._balance(chunk, calls.commit_balance)
        elif kind == _CALLS and calls is not None and calls.commit:
            keep = len(calls.commit) - 1
            window = self._commit_window + chunk
            if calls.commit in window:
                self._commit_hit = True
            self._commit_window = window[-keep:] if keep > 0 else ""
        self._pending.append(chunk)
        self._pending_len += len(chunk)
        ready = self._ready
        if ready is not None and not ready():
            return FED_NOTHING  # the step would wait again at once, having read nothing
        self._run()
        return FED_SOME

    def finish(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self._state == "running":
            self._run()
        if self._state == "tail":
            text = "".join(self._tail)
            if text:
                # the tail may have begun at a chunk's end: its reason needs the whole of it
                self._tail_reason = self._reason_for_tail(text)
            if text:
                self.dropped.append(
                    Dropped(text, self._tail_reason, self._tail_start - self.prompt_length)
                )
            self._state = "stopped"

    @property
    def reply_offset(self) -> int:
        return self._base + self._pos - self.prompt_length

    # ------------------------------------------------------------------ the steps

    def _materialize(self) -> None:
        if self._pending:
            if self._pos > 0:
                self._base += self._pos
                self._buf = self._buf[self._pos :]
                self._pos = 0
            self._buf += "".join(self._pending)
            self._pending.clear()
            self._pending_len = 0

    def _compact(self) -> None:
        if self._pos > 0:
            self._base += self._pos
            self._buf = self._buf[self._pos :]
            self._pos = 0

    def _run(self) -> None:
        while self._state == "running":
            self._plain_out = self._ready = None
            if self._step >= len(self._steps):
                self._enter_tail(self._tail_reason_for_end())
                return
            kind = self._steps[self._step]
            if kind == _CALLS:
                outcome = self._calls()
            elif kind == _CONTENT and self.fmt.content_value is not None:
                outcome = _NEXT if self._skip_content else self._content_value()
            elif kind == _FLOW and self._flow is not None:
                outcome = self._flow.step()
            elif not isinstance(kind, int):
                self._materialize()
                outcome = self._frame_step(kind)
            else:
                self._materialize()
                if kind == _PREFIX:
                    outcome = self._literal(self.fmt.prefix)
                elif kind == _REASONING:
                    outcome = self._reasoning()
                elif kind == _SPACE:
                    outcome = self._space()
                elif kind == _CONTENT:
                    outcome = _NEXT if self._skip_content else self._content()
                else:
                    outcome = self._end()
            if outcome == _WAIT:
                self._compact()
                return
            if outcome == _NEXT:
                self._step += 1
                self._sub = 0
                continue
            if outcome == _STOP:
                self._stop()
                return
            if outcome == _GOTO:
                continue
            self._state = "failed"
            return

    def _frame_step(self, step: Step) -> int:
        if self._step in self._after_calls and self._calls_done == 0:
            return _NEXT
        if isinstance(step, Whitespace):
            return self._space()
        if isinstance(step, Text):
            _, complete, at_end = self._scan(self._text_until[id(step)], self.content_pieces)
            if complete:
                return _NEXT
            if at_end:
                return _STOP if self._eof else _WAIT
            return _NEXT if self._eof else _WAIT  # a cut marker: `until` ends before it
        status = self._literal_status(step.text)
        if status == NEED_MORE:
            return _STOP if self._eof else _WAIT
        if isinstance(step, Marker):
            if status == SUCCESS:
                self._pos += len(step.text)
            return _NEXT
        assert isinstance(step, NotMarker)
        if status == SUCCESS:
            self._fail(f"{step.text!r} is not allowed here")
            return _FAIL
        return _NEXT

    def _stop(self) -> None:
        """The parse ended at the end of input (NEED_MORE): what is left was cut short."""
        self._materialize()
        rest = self._buf[self._pos :]
        if rest:
            self.dropped.append(Dropped(rest, "marker_prefix", self.reply_offset))
        self._state = "stopped"

    def _literal_status(self, literal: str) -> int:
        buf, pos = self._buf, self._pos
        if buf.startswith(literal, pos):
            return SUCCESS
        rest = buf[pos:]
        if len(rest) < len(literal) and literal.startswith(rest):
            return NEED_MORE
        return FAIL

    def _literal(self, literal: str) -> int:
        status = self._literal_status(literal)
        if status == SUCCESS:
            self._pos += len(literal)
            return _NEXT
        if status == NEED_MORE:
            return _STOP if self._eof else _WAIT
        self._fail("the reply does not start with the expected prefix")
        return _FAIL

    def _fail(self, reason: str) -> None:
        self.failure = EngineFailure(self._base + self._pos, reason)

    def _space(self) -> int:
        buf, n = self._buf, len(self._buf)
        pos = self._pos
        while pos < n and is_c_space(buf[pos]):
            pos += 1
        self._pos = pos
        if pos >= n and not self._eof:
            return _WAIT
        return _NEXT

    def _scan(self, until: Until, out: list[str]) -> tuple[int, bool, bool]:
        """Commit text up to a stop: (outcome-less) -> (stopped, complete, at_end)."""
        stop, complete = until.find(self._buf, self._pos)
        if stop > self._pos:
            out.append(self._buf[self._pos : stop])
            self._pos = stop
        if not complete and not self._eof:
            # every caller waits for more text here (the feed fast path may take it)
            self._plain_out, self._plain_until = out, until
        return stop, complete, stop >= len(self._buf)

    def _reasoning(self) -> int:
        block = self.fmt.reasoning
        assert block is not None and self._reasoning_until is not None
        if self._sub == 0:
            status = self._literal_status(block.start)
            if status == FAIL:
                return self._no_thought_start(block)
            if status == NEED_MORE:
                return _STOP if self._eof else _WAIT
            self._pos += len(block.start)
            if not block.stops:
                return _NEXT  # a lone marker (DeepSeek V4's pre-closed thought)
            self._inline(self._pos - len(block.start))
            self._sub = 1 if block.space_after_start else 4
        if self._sub == 4:
            at = self._pos
            if self._optional_chars(block.start_optional) == _WAIT:
                return _WAIT
            self._inline(at)
            self._sub = 2
        if self._sub == 1:
            at = self._pos
            outcome = self._space()
            self._inline(at)
            if outcome == _WAIT:
                return _WAIT
            self._sub = 2
        if self._sub == 2:
            _, complete, at_end = self._scan(self._reasoning_until, self._thought_pieces)
            # (a closer cut by the end still counts for an inline block: see below)
            if at_end or not (complete or (self._eof and block.as_content)):
                return _STOP if self._eof else _WAIT
            self._sub = 3
            if block.call_stops and any(
                self._buf.startswith(m, self._pos) for m in block.call_stops
            ):
                # the calls may begin here; if they do not parse the thought reads on
                self._thought_call = True
                self._step = self._steps.index(_CALLS)
                self._sub = 0
                return _GOTO
        for marker, consumed in block.closers:
            status = self._literal_status(marker)
            if status == SUCCESS:
                if consumed:
                    closer_at = self._pos
                    if block.end_optional:
                        at = self._pos
                        self._pos += len(marker)
                        if self._optional_chars(block.end_optional) == _WAIT:
                            self._pos = at
                            return _WAIT
                    else:
                        self._pos += len(marker)
                    self._inline(closer_at)
                return _NEXT
            if status == NEED_MORE:
                if self._eof and consumed and block.as_content:
                    # llama.cpp's inline block spans the cut-short closer up to the end
                    self._pos, at = len(self._buf), self._pos
                    self._inline(at)
                return _STOP if self._eof else _WAIT
        self._fail("the thought does not end with a closing marker")
        return _FAIL

    def _no_thought_start(self, block: ReasoningBlock) -> int:
        """The text does not open the thought: a bare marker, a failure, or no thought."""
        if block.bare:
            status = self._literal_status(block.bare)
            if status == SUCCESS:
                self._pos += len(block.bare)
                return _NEXT
            if status == NEED_MORE:
                return _STOP if self._eof else _WAIT
        if block.required:
            self._fail(f"the reply does not open its thought with {block.start}")
            return _FAIL
        if not block.start_may_be_absent:
            return _NEXT
        self._sub = 2
        return self._reasoning()

    def _inline(self, start: int) -> None:
        """Markup of a thought kept inline (``as_content``) is content too."""
        block = self.fmt.reasoning
        if block is not None and block.as_content and self._pos > start:
            self.content_pieces.append(self._buf[start : self._pos])

    def _optional_chars(self, chars: str) -> int:
        """Each of ``chars`` in turn, if it is there (decided once enough text has arrived)."""
        buf, n = self._buf, len(self._buf)
        pos = self._pos
        for ch in chars:
            if pos >= n:
                if not self._eof:
                    return _WAIT
                break
            if buf[pos] != ch:
                continue
            pos += 1
        self._pos = pos
        return _NEXT

    def _content_value(self) -> int:
        """Content read as one value (ReplyFormat.content_value), parsed whole like a call: when
        its text has doubled since the last try or the reply ends."""
        parser = self.fmt.content_value
        assert parser is not None
        if self._sub == 0:
            self._sub = 1
            self._tried_len = -1
        length = len(self._buf) - self._pos + self._pending_len
        if not (self._eof or self._tried_len < 0 or length >= 2 * self._tried_len):
            return _WAIT
        self._materialize()
        result = parser.parse(self._buf, self._pos)
        if result.status == FAIL:
            self._fail("the content is not the value the response format asks for")
            return _FAIL
        if result.status == NEED_MORE and not self._eof:
            self._tried_len = len(self._buf) - self._pos
            return _WAIT
        stack = list(reversed(result.nodes))
        while stack:
            node = stack.pop()
            if node.tag == "content":
                self.content_pieces.append(self._buf[node.start : node.end])
            else:
                stack.extend(reversed(node.children))
        self._pos = result.end
        return _NEXT if result.status == SUCCESS else _STOP

    def _content(self) -> int:
        fmt = self.fmt
        if fmt.content_start and self._sub == 0:
            status = self._literal_status(fmt.content_start)
            if status == NEED_MORE:
                return _STOP if self._eof else _WAIT
            if status == FAIL:
                if fmt.content_optional:
                    return _NEXT  # no content: what follows is read here
                self._fail(f"the reply does not go on with {fmt.content_start}")
                return _FAIL
            self._pos += len(fmt.content_start)
            self._sub = 1
        if self._sub == 2:
            return self._content_end()
        until = self._content_until
        if until is None:
            if self._pos < len(self._buf):
                self.content_pieces.append(self._buf[self._pos :])
                self._pos = len(self._buf)
            if self._eof:
                return _STOP
            self._plain_out, self._plain_until = self.content_pieces, None
            return _WAIT
        _, complete, at_end = self._scan(until, self.content_pieces)
        if complete:
            if fmt.content_end:
                self._sub = 2
                return self._content_end()
            return _NEXT
        if at_end:
            return _STOP if self._eof else _WAIT
        # a marker prefix cut by the end: llama.cpp's `until` ends before it and parsing goes on
        if self._eof and fmt.content_end:
            self._sub = 2
            return self._content_end()
        return _NEXT if self._eof else _WAIT

    def _content_end(self) -> int:
        """The optional marker that closes framed content."""
        status = self._literal_status(self.fmt.content_end)
        if status == NEED_MORE:
            return _STOP if self._eof else _WAIT
        if status == SUCCESS:
            self._pos += len(self.fmt.content_end)
        return _NEXT

    def _end(self) -> int:
        self._materialize()
        marker = self.fmt.end_marker
        if marker and self._pos < len(self._buf):
            status = self._literal_status(marker)
            if status == NEED_MORE:
                return _STOP if self._eof else _WAIT
            if status == SUCCESS:
                self._pos += len(marker)
        if self._pos < len(self._buf):
            self._fail("text after the end of the reply format")
            return _FAIL
        return _NEXT if self._eof else _WAIT

    def _calls(self) -> int:
        section = self.fmt.calls
        assert section is not None
        while True:
            if self._sub == 2:
                self._materialize()
                if self._space() == _WAIT:
                    return _WAIT
                self._sub = 0
            if self._sub == 0:
                if section.next is None and self._calls_done >= 1:
                    self._limit_reached = True
                    self._skip_content = self.fmt.calls_or_content
                    return _NEXT
                self._materialize()
                if self._pos >= len(self._buf):
                    return _STOP if self._eof else _WAIT
                self._sub = 1
                self._tried_len = -1
            # a call is in progress: parse it only when it may have changed its outcome
            length = len(self._buf) - self._pos + self._pending_len
            if not (
                self._eof
                or self._commit_hit
                or self._tried_len < 0
                or length >= 2 * self._tried_len
            ):
                self._ready = self._call_ready
                return _WAIT
            self._materialize()
            self._commit_hit = False
            grammar = section.first if self._calls_done == 0 else section.next
            assert grammar is not None
            result = grammar.parse(self._buf, self._pos)
            if section.settle and result.status == SUCCESS and result.end >= len(self._buf):
                if not self._eof:
                    self._tried_len = len(self._buf) - self._pos
                    keep = len(section.commit) - 1
                    self._commit_window = self._buf[len(self._buf) - keep :] if keep > 0 else ""
                    self._ready = self._call_ready
                    return _WAIT
            if result.status == SUCCESS:
                self._thought_call = False
                self.mapper.visit(result.nodes, self._buf)
                self.committed_calls = list(self.mapper.calls)
                self._calls_done += 1
                self._pos = result.end
                self._compact()
                self._sub = 2 if section.space_after else 0
                continue
            if result.status == NEED_MORE:
                if self._eof:
                    self.mapper.visit(result.nodes, self._buf)
                    self.mapper.flush()
                    if len(self.mapper.calls) == len(self.committed_calls):
                        return _STOP
                    self._pos = len(self._buf)
                    return _STOP
                self._tried_len = len(self._buf) - self._pos
                keep = len(section.commit) - 1
                self._commit_window = self._buf[len(self._buf) - keep :] if keep > 0 else ""
                if section.commit_balance is not None:
                    self._depth, self._quote, self._escaped = 0, "", False
                    self._balance(self._buf[self._pos :], section.commit_balance)
                    self._commit_hit = False
                self._ready = self._call_ready
                return _WAIT
            if self._thought_call:
                # not calls after all: the stop is thought text, the thought ends at its closer
                self._thought_call = False
                block = self.fmt.reasoning
                assert block is not None
                stops = [m for m in block.stops if m not in block.call_stops]
                self._reasoning_until = Until(*stops)
                self._step = self._steps.index(_REASONING)
                self._sub = 2
                return _GOTO
            if self._calls_done == 0 and section.required:
                reason = "no valid tool call although tool_choice is required"
                at = result.end if section.fail_at_parse_end else self._pos
                self.failure = EngineFailure(self._base + at, reason)
                return _FAIL
            if self.fmt.calls_or_content:
                # no calls: the content alternative; after calls: no content
                self._skip_content = self._calls_done > 0
                return _NEXT
            self._segment_failed = True
            return _NEXT

    def _call_ready(self) -> bool:
        """Whether `_calls` would try the call in progress again (it waits with a sub-state of
        1, a tried length, and no end of input)."""
        length = len(self._buf) - self._pos + self._pending_len
        return self._commit_hit or length >= 2 * self._tried_len

    def _balance(self, text: str, balance: tuple[str, str, str]) -> None:
        """Track open/close characters outside quoted strings; a return to zero may end a call."""
        opener, closer, quotes = balance
        depth, quote, escaped = self._depth, self._quote, self._escaped
        for ch in text:
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote:
                    quote = ""
            elif ch in quotes:
                quote = ch
            elif ch == opener:
                depth += 1
            elif ch == closer:
                depth -= 1
                if depth <= 0:
                    depth = 0
                    self._commit_hit = True
        self._depth, self._quote, self._escaped = depth, quote, escaped

    # ------------------------------------------------------------------ dropped text

    def _tail_reason_for_end(self) -> str:
        if self._flow is not None:
            self._materialize()
            return self._flow.tail_reason(self._buf[self._pos :].lstrip(" \t\n\v\f\r"))
        section = self.fmt.calls
        if section is None:
            return "trailing_text"
        self._materialize()
        rest = self._buf[self._pos :].lstrip(" \t\n\v\f\r")
        return _classify(section, rest, self._limit_reached, self._segment_failed)

    def _reason_for_tail(self, text: str) -> str:
        rest = text.lstrip(" \t\n\v\f\r")
        if self._flow is not None:
            return self._flow.tail_reason(rest)
        if self.fmt.calls is None:
            return self._tail_reason
        return _classify(self.fmt.calls, rest, self._limit_reached, self._segment_failed)

    def _enter_tail(self, reason: str) -> None:
        self._materialize()
        self._tail = [self._buf[self._pos :]] if self._pos < len(self._buf) else []
        self._tail_start = self._base + self._pos
        self._tail_reason = reason
        self._buf = ""
        self._base = self._tail_start
        self._pos = 0
        self._state = "tail"

    # ------------------------------------------------------------------ results

    @property
    def failed(self) -> bool:
        return self._state == "failed"

    def calls(self) -> list[MappedCall]:
        """Calls known so far (after finish: with the one a cut-short reply left open)."""
        return self.mapper.calls


def _classify(section: CallSection, rest: str, limit_reached: bool, segment_failed: bool) -> str:
    opens_call = any(rest.startswith(o) for o in section.openers)
    if limit_reached and opens_call:
        return "parallel_limit"
    if segment_failed and section.name_marker:
        at = rest.find(section.name_marker)
        if at >= 0 and (opens_call or at == 0):
            start = at + len(section.name_marker)
            end = rest.find(section.name_marker_end, start)
            name = rest[start:end] if end >= 0 else rest[start:]
            if end >= 0 and name not in section.tool_names:
                return "unknown_tool"
    if segment_failed and opens_call:
        return "invalid_call"
    return "trailing_text"
